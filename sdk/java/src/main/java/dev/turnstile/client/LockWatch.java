package dev.turnstile.client;

import io.grpc.Context;
import io.grpc.StatusRuntimeException;
import java.util.Iterator;
import java.util.NoSuchElementException;
import turnstile.v1.Lock;
import turnstile.v1.LockServiceGrpc;

/**
 * A lock's state now, then each change, as a blocking iterator ({@link #next()} waits
 * for the next change). A stream cut by {@code UNAVAILABLE} is opened again, and a state
 * older than one already seen (a lower fencing token) is skipped. Close it to stop.
 */
public final class LockWatch implements Iterator<LockState>, AutoCloseable {
  private final LockServiceGrpc.LockServiceBlockingStub stub;
  private final String name;
  private volatile boolean closed;
  private Context.CancellableContext context;
  private Iterator<Lock.WatchResponse> events;
  private long newest;

  LockWatch(Rpc rpc, String name) {
    this.stub = LockServiceGrpc.newBlockingStub(rpc.channel);
    this.name = name;
  }

  /** True until closed. */
  @Override
  public boolean hasNext() {
    return !closed;
  }

  @Override
  public LockState next() {
    for (int attempt = 1; ; attempt++) {
      if (closed) {
        throw new NoSuchElementException("the watch is closed");
      }
      try {
        if (events == null) {
          open();
        }
        while (events.hasNext()) {
          Lock.WatchResponse m = events.next();
          attempt = 1;
          LockState state;
          if (m.hasHeld()) {
            state = new LockState(true, m.getHeld().getOwner(), m.getHeld().getFencingToken(),
                Rpc.instant(m.getHeld().hasExpiresAt(), m.getHeld().getExpiresAt()));
          } else if (m.hasFree()) {
            state = new LockState(false, "", m.getFree().getFencingToken(), null);
          } else {
            continue;
          }
          if (state.fencingToken() < newest) {
            continue;
          }
          newest = state.fencingToken();
          return state;
        }
        events = null;
      } catch (StatusRuntimeException err) {
        events = null;
        if (closed) {
          throw new NoSuchElementException("the watch is closed");
        }
        if (Rpc.isFinal(err.getStatus().getCode())) {
          throw TurnstileException.of(err);
        }
      }
      Rpc.sleep(Backoff.RETRY.delay(attempt));
    }
  }

  private synchronized void open() {
    context = Context.current().withCancellation();
    Lock.WatchRequest request = Lock.WatchRequest.newBuilder().setName(name).build();
    events = Rpc.within(context, () -> stub.watch(request));
  }

  @Override
  public synchronized void close() {
    closed = true;
    if (context != null) {
      context.cancel(null);
    }
  }
}
