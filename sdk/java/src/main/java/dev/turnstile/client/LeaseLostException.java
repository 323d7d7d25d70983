package dev.turnstile.client;

/**
 * A lease that is gone: it expired while no replica could be reached, was taken over
 * after expiry, or was released by {@code ReleaseAll}.
 */
public class LeaseLostException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final String reason;

  public LeaseLostException(String name, String reason) {
    super("the lease of \"" + name + "\" was lost: " + reason);
    this.reason = reason;
  }

  /** Why the lease is gone. */
  public String reason() {
    return reason;
  }
}
