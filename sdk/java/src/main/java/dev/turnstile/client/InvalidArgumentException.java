package dev.turnstile.client;

import io.grpc.Status;

/** A bad argument; the message starts with the field's name. */
public class InvalidArgumentException extends TurnstileException {
  private static final long serialVersionUID = 1L;

  public InvalidArgumentException(String message) {
    super(Status.Code.INVALID_ARGUMENT, message);
  }
}
