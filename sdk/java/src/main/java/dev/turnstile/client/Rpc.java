package dev.turnstile.client;

import com.google.protobuf.Timestamp;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import turnstile.v1.LockServiceGrpc;
import turnstile.v1.QueueServiceGrpc;
import turnstile.v1.ScheduleServiceGrpc;
import turnstile.v1.SemaphoreServiceGrpc;

/** The channel's stubs, and unary calls retried through UNAVAILABLE. */
final class Rpc {
  /** How long a call keeps retrying through UNAVAILABLE when it has no deadline of its own. */
  static final Duration DEFAULT_DEADLINE = Duration.ofSeconds(30);

  final ManagedChannel channel;
  final LockServiceGrpc.LockServiceBlockingStub locks;
  final QueueServiceGrpc.QueueServiceBlockingStub queues;
  final ScheduleServiceGrpc.ScheduleServiceBlockingStub schedules;
  final SemaphoreServiceGrpc.SemaphoreServiceBlockingStub semaphores;

  Rpc(ManagedChannel channel) {
    this(channel, null);
  }

  private Rpc(ManagedChannel channel, Duration deadline) {
    this.channel = channel;
    LockServiceGrpc.LockServiceBlockingStub locks = LockServiceGrpc.newBlockingStub(channel);
    QueueServiceGrpc.QueueServiceBlockingStub queues = QueueServiceGrpc.newBlockingStub(channel);
    ScheduleServiceGrpc.ScheduleServiceBlockingStub schedules = ScheduleServiceGrpc.newBlockingStub(channel);
    SemaphoreServiceGrpc.SemaphoreServiceBlockingStub semaphores = SemaphoreServiceGrpc.newBlockingStub(channel);
    if (deadline != null) {
      long nanos = deadline.toNanos();
      locks = locks.withDeadlineAfter(nanos, TimeUnit.NANOSECONDS);
      queues = queues.withDeadlineAfter(nanos, TimeUnit.NANOSECONDS);
      schedules = schedules.withDeadlineAfter(nanos, TimeUnit.NANOSECONDS);
      semaphores = semaphores.withDeadlineAfter(nanos, TimeUnit.NANOSECONDS);
    }
    this.locks = locks;
    this.queues = queues;
    this.schedules = schedules;
    this.semaphores = semaphores;
  }

  /** {@code call} on stubs with a deadline, retried through UNAVAILABLE for at most 30 s. */
  <T> T call(Function<Rpc, T> call) {
    return call(DEFAULT_DEADLINE, call);
  }

  /** {@code call} retried through UNAVAILABLE until {@code within} has passed. */
  <T> T call(Duration within, Function<Rpc, T> call) {
    long end = System.nanoTime() + within.toNanos();
    for (int attempt = 1; ; attempt++) {
      long left = end - System.nanoTime();
      try {
        return call.apply(new Rpc(channel, Duration.ofNanos(Math.max(1, left))));
      } catch (StatusRuntimeException err) {
        Duration pause = Backoff.RETRY.delay(attempt);
        if (code(err.getStatus()) != Status.Code.UNAVAILABLE
            || System.nanoTime() + pause.toNanos() > end) {
          throw TurnstileException.of(err);
        }
        sleep(pause);
      }
    }
  }

  static void sleep(Duration pause) {
    try {
      Thread.sleep(pause.toMillis(), (int) (pause.toNanos() % 1_000_000));
    } catch (InterruptedException err) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted", err);
    }
  }

  /**
   * The code a failure counts as. grpc-java answers a call whose connection closed under
   * it (a replica killed, a reset) with UNKNOWN "channel closed" and a {@link
   * java.nio.channels.ClosedChannelException} as its cause, where other gRPC libraries say
   * UNAVAILABLE: it is UNAVAILABLE here, and retried as one (the ids the library fills
   * make the retry safe). Seen: a producer's enqueue failing through a server restart.
   */
  static Status.Code code(Status status) {
    if (status.getCode() == Status.Code.UNKNOWN
        && status.getCause() instanceof java.nio.channels.ClosedChannelException) {
      return Status.Code.UNAVAILABLE;
    }
    return status.getCode();
  }

  /** Codes a long-lived stream will not get past by opening again. */
  static boolean isFinal(Status.Code code) {
    switch (code) {
      case INVALID_ARGUMENT:
      case UNAUTHENTICATED:
      case PERMISSION_DENIED:
      case FAILED_PRECONDITION:
      case UNIMPLEMENTED:
        return true;
      default:
        return false;
    }
  }

  /** {@code call} run in {@code context}, so the stream it opens ends when the context is cancelled. */
  static <T> T within(io.grpc.Context.CancellableContext context, java.util.function.Supplier<T> call) {
    io.grpc.Context previous = context.attach();
    try {
      return call.get();
    } finally {
      context.detach(previous);
    }
  }

  static com.google.protobuf.Duration duration(Duration d) {
    return com.google.protobuf.Duration.newBuilder().setSeconds(d.getSeconds()).setNanos(d.getNano()).build();
  }

  static Timestamp timestamp(Instant at) {
    return Timestamp.newBuilder().setSeconds(at.getEpochSecond()).setNanos(at.getNano()).build();
  }

  /** A wire timestamp as an Instant (null when unset). */
  static Instant instant(boolean set, Timestamp t) {
    return set ? Instant.ofEpochSecond(t.getSeconds(), t.getNanos()) : null;
  }

  static Duration durationOf(com.google.protobuf.Duration d) {
    return Duration.ofSeconds(d.getSeconds(), d.getNanos());
  }
}
