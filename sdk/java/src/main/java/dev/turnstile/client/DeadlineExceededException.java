package dev.turnstile.client;

import io.grpc.Status;

/** The call's deadline passed. */
public class DeadlineExceededException extends TurnstileException {
  private static final long serialVersionUID = 1L;

  public DeadlineExceededException(String message) {
    super(Status.Code.DEADLINE_EXCEEDED, message);
  }
}
