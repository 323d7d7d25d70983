package dev.turnstile.client;

import io.grpc.Status;

/** A token without the permission the call needs. */
public class PermissionDeniedException extends TurnstileException {
  private static final long serialVersionUID = 1L;

  public PermissionDeniedException(String message) {
    super(Status.Code.PERMISSION_DENIED, message);
  }
}
