package dev.turnstile.client;

import io.grpc.Context;
import io.grpc.StatusRuntimeException;
import java.lang.System.Logger.Level;
import java.time.Duration;
import java.time.Instant;
import java.util.Iterator;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;
import turnstile.v1.Lock;
import turnstile.v1.LockServiceGrpc;
import turnstile.v1.Semaphore;
import turnstile.v1.SemaphoreServiceGrpc;

/**
 * A held lock, semaphore permit or leadership. The server renews it while its {@code
 * Hold} stream is open; a cut stream is re-opened with the lease's token (on any replica)
 * until one answers or the lease's end passes. {@link #lost()} completes, and the {@link
 * #onLost} listeners run, only when the lease is really gone, never for a re-attach that
 * kept it. Close it (try-with-resources) to release it.
 */
public class Lease implements AutoCloseable {
  private static final System.Logger LOG = System.getLogger(Lease.class.getName());
  /** The longest wait one Hold takes (the server's bound); longer waits ask again. */
  private static final Duration MAX_WAIT = Duration.ofHours(1);

  private final String name;
  private final String owner;
  private final String token;
  private final long fencingToken;
  private final Kind kind;
  private final CompletableFuture<LeaseLostException> lost = new CompletableFuture<>();
  private final Object lock = new Object();
  private volatile Instant expiresAt;
  /** When the lease ends at the latest (System.nanoTime), as last told. */
  private volatile long ends;
  private volatile boolean released;
  private HoldStream stream;

  Lease(Kind kind, HoldStream stream, Event acquired) {
    this.name = kind.name;
    this.owner = kind.owner;
    this.kind = kind;
    this.stream = stream;
    this.token = acquired.token;
    this.fencingToken = acquired.fencingToken;
    renewed(acquired.expiresAt);
    Thread keeper = new Thread(this::keep, "turnstile-lease-" + name);
    keeper.setDaemon(true);
    keeper.start();
  }

  public String name() {
    return name;
  }

  public String owner() {
    return owner;
  }

  /** The lease's token (re-attaches and releases by it). */
  public String token() {
    return token;
  }

  /** The fencing token: pass it to storage that refuses older ones. */
  public long fencingToken() {
    return fencingToken;
  }

  /** The lease's end as the server last told it (it moves on with each renewal). */
  public Instant expiresAt() {
    return expiresAt;
  }

  /** Completes with the {@link LeaseLostException} when the lease is lost (never on release). */
  public CompletableFuture<LeaseLostException> lost() {
    return lost.copy();
  }

  /** Whether the lease is lost. */
  public boolean isLost() {
    return lost.isDone();
  }

  /** Runs {@code listener} (on the lease's own thread) when the lease is lost. */
  public void onLost(Consumer<LeaseLostException> listener) {
    lost.thenAccept(listener);
  }

  /** Throws the {@link LeaseLostException} once the lease is lost. */
  public void check() {
    LeaseLostException gone = lost.getNow(null);
    if (gone != null) {
      throw gone;
    }
  }

  /** Frees the lease (only this holder's); true when this call freed it. */
  public boolean release() {
    synchronized (lock) {
      if (released) {
        return false;
      }
      released = true;
    }
    boolean freed = false;
    // Release first, then close the stream: closing it frees the lease too, and a close
    // that won the race would make the Release answer false.
    if (!lost.isDone()) {
      try {
        freed = kind.release.apply(token);
      } catch (UnavailableException err) {
        // Closing the stream frees it once the server sees the close.
      }
    }
    currentStream().cancel();
    return freed;
  }

  /** {@link #release()}. */
  @Override
  public void close() {
    release();
  }

  private HoldStream currentStream() {
    synchronized (lock) {
      return stream;
    }
  }

  private void renewed(Instant expiresAt) {
    long until = System.nanoTime() + kind.ttl.toNanos();
    if (expiresAt != null) {
      this.expiresAt = expiresAt;
      until = Math.min(until, System.nanoTime() + Duration.between(Instant.now(), expiresAt).toNanos());
    }
    ends = until;
  }

  private void lose(String reason) {
    synchronized (lock) {
      if (released || lost.isDone()) {
        return;
      }
    }
    currentStream().cancel();
    lost.complete(new LeaseLostException(name, reason));
  }

  /** Reads the lease's stream, and re-opens it after a cut, until released or lost. */
  private void keep() {
    HoldStream current = currentStream();
    while (current != null && !released) {
      try {
        for (Event event = current.next(); event != null; event = current.next()) {
          if (event.lostReason != null) {
            lose(event.lostReason);
            return;
          }
          renewed(event.expiresAt);
        }
      } catch (StatusRuntimeException err) {
        if (released) {
          return;
        }
        if (Rpc.isFinal(err.getStatus().getCode())) {
          lose(TurnstileException.of(err).getMessage());
          return;
        }
        LOG.log(Level.DEBUG, "turnstile: the Hold stream of " + name + " was cut; re-attaching");
      }
      current = reattach();
    }
  }

  /** A new stream holding the same lease, or null (and the lease is lost) once its end passed. */
  private HoldStream reattach() {
    for (int attempt = 1; !released; attempt++) {
      long left = ends - System.nanoTime();
      if (left <= 0) {
        lose("the lease ran out while no replica answered");
        return null;
      }
      HoldStream next = kind.open(token, Duration.ZERO);
      synchronized (lock) {
        if (released) {
          next.cancel();
          return null;
        }
        stream = next;
      }
      try {
        Event first = next.next();
        if (first != null && first.lostReason != null) {
          lose(first.lostReason);
          return null;
        }
        if (first != null && first.token != null) {
          renewed(first.expiresAt);
          return next;
        }
      } catch (StatusRuntimeException err) {
        if (released) {
          return null;
        }
        if (Rpc.isFinal(err.getStatus().getCode())) {
          lose(TurnstileException.of(err).getMessage());
          return null;
        }
      }
      next.cancel();
      Rpc.sleep(Duration.ofNanos(Math.min(Backoff.RETRY.delay(attempt).toNanos(), Math.max(0, left))));
    }
    return null;
  }

  /**
   * Opens Hold streams until one acquires, {@code wait} runs out ({@link
   * NotAcquiredException}; null waits without end), or a final error.
   */
  static Lease acquire(Rpc rpc, Kind kind, Duration wait) {
    Long end = wait == null ? null : System.nanoTime() + wait.toNanos();
    for (int attempt = 1; ; attempt++) {
      Duration left = end == null ? MAX_WAIT : Duration.ofNanos(Math.max(0, end - System.nanoTime()));
      HoldStream stream = kind.open("", left.compareTo(MAX_WAIT) > 0 ? MAX_WAIT : left);
      Event first = null;
      StatusRuntimeException failed = null;
      try {
        first = stream.next();
      } catch (StatusRuntimeException err) {
        failed = err;
      }
      if (first != null && first.token != null) {
        return kind.permits > 0 ? new Permit(kind, stream, first) : new Lease(kind, stream, first);
      }
      stream.cancel();
      boolean expired = end != null && System.nanoTime() >= end;
      if (failed != null) {
        if (Rpc.isFinal(failed.getStatus().getCode()) || expired) {
          throw TurnstileException.of(failed);
        }
      } else if (expired) {
        throw new NotAcquiredException(kind.name);
      }
      // A wait the server ended for a reason other than its own timeout, or a cut
      // stream: ask again after a pause.
      if (failed != null || wait == null || first == null || !"not acquired".equals(first.lostReason)) {
        long pause = Backoff.RETRY.delay(attempt).toNanos();
        if (end != null) {
          pause = Math.min(pause, Math.max(0, end - System.nanoTime()));
        }
        Rpc.sleep(Duration.ofNanos(pause));
      }
    }
  }

  /** One event of a Hold stream: acquired (token set), renewed, or lost (reason set). */
  static final class Event {
    String token;
    long fencingToken;
    Instant expiresAt;
    String lostReason;
  }

  private static Event of(Lock.HoldResponse m) {
    Event event = new Event();
    switch (m.getEventCase()) {
      case ACQUIRED:
        event.token = m.getAcquired().getToken();
        event.fencingToken = m.getAcquired().getFencingToken();
        event.expiresAt = Rpc.instant(m.getAcquired().hasExpiresAt(), m.getAcquired().getExpiresAt());
        return event;
      case RENEWED:
        event.expiresAt = Rpc.instant(m.getRenewed().hasExpiresAt(), m.getRenewed().getExpiresAt());
        return event;
      case LOST:
        event.lostReason = m.getLost().getReason();
        return event;
      default:
        return null;
    }
  }

  /** A Hold stream: its events (heartbeats skipped; null at its end) and its cancel. */
  static final class HoldStream {
    private final Context.CancellableContext context;
    private final Iterator<Lock.HoldResponse> events;

    HoldStream(Context.CancellableContext context, Iterator<Lock.HoldResponse> events) {
      this.context = context;
      this.events = events;
    }

    Event next() {
      while (events.hasNext()) {
        Event event = of(events.next());
        if (event != null) {
          return event;
        }
      }
      return null;
    }

    void cancel() {
      context.cancel(null);
    }
  }

  /** What a lease holds: it opens Hold streams and releases by token. */
  static final class Kind {
    final String name;
    final String owner;
    final Duration ttl;
    /** A semaphore's permits taken; 0 for a lock. */
    final int permits;
    private final java.util.function.BiFunction<String, Duration, HoldStream> opener;
    final java.util.function.Function<String, Boolean> release;

    private Kind(String name, String owner, Duration ttl, int permits,
        java.util.function.BiFunction<String, Duration, HoldStream> opener,
        java.util.function.Function<String, Boolean> release) {
      this.name = name;
      this.owner = owner;
      this.ttl = ttl;
      this.permits = permits;
      this.opener = opener;
      this.release = release;
    }

    HoldStream open(String token, Duration wait) {
      return opener.apply(token, wait);
    }

    static Kind lock(Rpc rpc, String name, Duration ttl, LeaseOptions options) {
      LockServiceGrpc.LockServiceBlockingStub stub = LockServiceGrpc.newBlockingStub(rpc.channel);
      return new Kind(name, options.owner(), ttl, 0, (token, wait) -> {
        Lock.HoldRequest request = Lock.HoldRequest.newBuilder().setName(name).setOwner(options.owner())
            .setTtl(Rpc.duration(ttl)).setWait(Rpc.duration(wait)).setToken(token).build();
        Context.CancellableContext context = Context.current().withCancellation();
        return new HoldStream(context, Rpc.within(context, () -> stub.hold(request)));
      }, token -> rpc.call(r -> r.locks.release(
          Lock.ReleaseRequest.newBuilder().setName(name).setToken(token).build())).getReleased());
    }

    static Kind semaphore(Rpc rpc, String name, int limit, Duration ttl, LeaseOptions options) {
      SemaphoreServiceGrpc.SemaphoreServiceBlockingStub stub = SemaphoreServiceGrpc.newBlockingStub(rpc.channel);
      return new Kind(name, options.owner(), ttl, options.permits(), (token, wait) -> {
        Semaphore.SemaphoreServiceHoldRequest request = Semaphore.SemaphoreServiceHoldRequest.newBuilder()
            .setName(name).setOwner(options.owner()).setLimit(limit).setPermits(options.permits())
            .setTtl(Rpc.duration(ttl)).setWait(Rpc.duration(wait)).setToken(token).build();
        Context.CancellableContext context = Context.current().withCancellation();
        Iterator<Semaphore.SemaphoreServiceHoldResponse> events = Rpc.within(context, () -> stub.hold(request));
        // The same events as a lock's: acquired, renewed, lost, heartbeat.
        Iterator<Lock.HoldResponse> asLock = new Iterator<>() {
          @Override
          public boolean hasNext() {
            return events.hasNext();
          }

          @Override
          public Lock.HoldResponse next() {
            Semaphore.SemaphoreServiceHoldResponse m = events.next();
            Lock.HoldResponse.Builder same = Lock.HoldResponse.newBuilder();
            switch (m.getEventCase()) {
              case ACQUIRED:
                return same.setAcquired(m.getAcquired()).build();
              case RENEWED:
                return same.setRenewed(m.getRenewed()).build();
              case LOST:
                return same.setLost(m.getLost()).build();
              default:
                return same.setHeartbeat(m.getHeartbeat()).build();
            }
          }
        };
        return new HoldStream(context, asLock);
      }, token -> rpc.call(r -> r.semaphores.release(
          Semaphore.SemaphoreServiceReleaseRequest.newBuilder().setName(name).setToken(token).build())).getReleased());
    }
  }
}
