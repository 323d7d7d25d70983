package dev.turnstile.client;

/** Thrown by a handler: give up on the task (it goes DEAD now, with the reason). */
public class Fail extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public Fail(String reason) {
    super(reason);
  }
}
