package dev.turnstile.client;

import io.grpc.Status;

/** What the call names is not there. */
public class NotFoundException extends TurnstileException {
  private static final long serialVersionUID = 1L;

  public NotFoundException(String message) {
    super(Status.Code.NOT_FOUND, message);
  }
}
