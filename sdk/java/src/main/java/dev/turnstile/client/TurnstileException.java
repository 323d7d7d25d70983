package dev.turnstile.client;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;

/**
 * A call the server (or the library, for a bad argument it can see itself) refused: the
 * gRPC code and the server's message, which names the field for {@code
 * INVALID_ARGUMENT}. The codes a caller acts on have subclasses ({@link
 * InvalidArgumentException}, {@link UnauthenticatedException}, ...).
 */
public class TurnstileException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final Status.Code code;
  private final String details;

  public TurnstileException(Status.Code code, String message) {
    super(code + ": " + message);
    this.code = code;
    this.details = message;
  }

  /** The gRPC status code. */
  public Status.Code code() {
    return code;
  }

  /** The server's message (for {@code INVALID_ARGUMENT} it starts with the field). */
  public String details() {
    return details;
  }

  /** The typed exception of a gRPC failure. */
  static TurnstileException of(StatusRuntimeException err) {
    Status status = err.getStatus();
    String message = status.getDescription() == null ? "" : status.getDescription();
    return of(Rpc.code(status), message);
  }

  static TurnstileException of(Status.Code code, String message) {
    switch (code) {
      case INVALID_ARGUMENT:
        return new InvalidArgumentException(message);
      case UNAUTHENTICATED:
        return new UnauthenticatedException(message);
      case PERMISSION_DENIED:
        return new PermissionDeniedException(message);
      case NOT_FOUND:
        return new NotFoundException(message);
      case UNAVAILABLE:
        return new UnavailableException(message);
      case DEADLINE_EXCEEDED:
        return new DeadlineExceededException(message);
      default:
        return new TurnstileException(code, message);
    }
  }
}
