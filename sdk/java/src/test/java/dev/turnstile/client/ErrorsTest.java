package dev.turnstile.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;

import io.grpc.Status;
import java.nio.channels.ClosedChannelException;
import org.junit.jupiter.api.Test;

/** How gRPC failures are classified: what is retried, which exception a caller gets. */
class ErrorsTest {
  @Test
  void aConnectionClosedUnderACallIsUnavailableAndOtherUnknownsAreNot() {
    // What grpc-java answers when the server is killed under a call (seen in scenario 10).
    Status closed = Status.UNKNOWN.withDescription("channel closed").withCause(new ClosedChannelException());
    assertEquals(Status.Code.UNAVAILABLE, Rpc.code(closed));
    assertInstanceOf(UnavailableException.class, TurnstileException.of(closed.asRuntimeException()));
    Status unknown = Status.UNKNOWN.withDescription("a handler threw").withCause(new IllegalStateException());
    assertEquals(Status.Code.UNKNOWN, Rpc.code(unknown));
    assertEquals(Status.Code.UNKNOWN, TurnstileException.of(unknown.asRuntimeException()).code());
  }
}
