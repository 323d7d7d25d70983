package dev.turnstile.client;

import io.grpc.Status;

/** No token, or one the server does not know. */
public class UnauthenticatedException extends TurnstileException {
  private static final long serialVersionUID = 1L;

  public UnauthenticatedException(String message) {
    super(Status.Code.UNAUTHENTICATED, message);
  }
}
