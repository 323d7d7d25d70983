package dev.turnstile.client;

import java.time.Duration;

/** Thrown by a handler: the task is given back, due again after {@code delay}. */
public class Retry extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final Duration delay;

  public Retry(Duration delay) {
    super("retry in " + delay);
    this.delay = delay;
  }

  public Duration delay() {
    return delay;
  }
}
