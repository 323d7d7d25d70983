package dev.turnstile.client;

/** A {@code lock} or {@code semaphore} whose wait ran out. */
public class NotAcquiredException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public NotAcquiredException(String name) {
    super("not acquired: " + name);
  }
}
