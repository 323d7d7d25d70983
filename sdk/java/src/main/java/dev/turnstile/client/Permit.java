package dev.turnstile.client;

/**
 * A held share of a semaphore: a {@link Lease} (held through {@code Hold}, re-attached
 * after a cut, released on {@link #close()}) of {@link #permits()} permits.
 */
public final class Permit extends Lease {
  private final int permits;

  Permit(Kind kind, HoldStream stream, Event acquired) {
    super(kind, stream, acquired);
    this.permits = kind.permits;
  }

  /** How many of the semaphore's permits this holds. */
  public int permits() {
    return permits;
  }
}
