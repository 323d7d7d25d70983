package dev.turnstile.client;

import io.grpc.Status;

/** No replica answered within the call's deadline (calls are retried through it first). */
public class UnavailableException extends TurnstileException {
  private static final long serialVersionUID = 1L;

  public UnavailableException(String message) {
    super(Status.Code.UNAVAILABLE, message);
  }
}
