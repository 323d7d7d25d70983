package dev.turnstile.client;

import com.google.protobuf.ByteString;
import io.grpc.Context;
import io.grpc.StatusRuntimeException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.System.Logger.Level;
import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import turnstile.v1.Queue.AckRequest;
import turnstile.v1.Queue.ExtendLeaseRequest;
import turnstile.v1.Queue.ExtendLeaseResponse;
import turnstile.v1.Queue.NackRequest;
import turnstile.v1.Queue.SubscribeRequest;
import turnstile.v1.Queue.SubscribeResponse;
import turnstile.v1.QueueServiceGrpc;

/**
 * Runs a handler on a queue's tasks through one {@code Subscribe} stream: up to {@code
 * concurrency} handlers at once, acks coalesced, leases extended for long handlers, the
 * stream re-attached by {@code workerId} after a cut, and a drain that finishes what runs
 * and acks nothing unfinished.
 *
 * <p>The drain holds acks and nacks until the stream is closed: each would free a slot the
 * server fills with a delivery the draining worker must give back (an attempt spent for
 * nothing). Receipts stay valid after the close (the deliveries stay leased to the worker
 * id for the server's re-attach grace), so the held acks and nacks go right after it.
 */
public final class Worker implements AutoCloseable {
  private static final System.Logger LOG = System.getLogger(Worker.class.getName());
  /** The most receipts one Ack carries. */
  public static final int ACK_BATCH = 64;
  /** The most bytes a handler's result may hold (the server refuses more). */
  public static final int MAX_RESULT_BYTES = 64 * 1024;
  private static final AtomicInteger WORKERS = new AtomicInteger();

  private final Rpc rpc;
  private final String queue;
  private final Handler handler;
  private final WorkerOptions options;
  private final String workerId;
  private final ExecutorService executor;
  private final boolean ownExecutor;
  /** Lease extensions, give-backs and acks: the worker's own background thread. */
  private final ScheduledExecutorService background;
  /** Sends the acks, one Ack at a time. */
  private final ExecutorService ackSender;
  private final Acks acks;
  private final CountDownLatch stopped = new CountDownLatch(1);
  private final CountDownLatch finished = new CountDownLatch(1);

  private final Object lock = new Object();
  private final Map<String, Run> running = new HashMap<>();
  private final Set<String> cut = new HashSet<>();
  private final List<String> unstarted = new ArrayList<>();
  private final List<Nack> heldNacks = new ArrayList<>();
  private boolean draining;
  private Context.CancellableContext stream;
  private volatile TurnstileException refused;

  Worker(Rpc rpc, String queue, Handler handler, WorkerOptions options) {
    this.rpc = rpc;
    this.queue = queue;
    this.handler = handler;
    this.options = options;
    this.workerId = options.workerId != null ? options.workerId
        : LeaseOptions.hostPid() + "-" + Integer.toHexString(ThreadLocalRandom.current().nextInt(1 << 24));
    int n = WORKERS.incrementAndGet();
    this.ownExecutor = options.executor == null;
    this.executor = ownExecutor ? Executors.newFixedThreadPool(options.concurrency, daemon("turnstile-handler-" + n)) : options.executor;
    this.background = Executors.newSingleThreadScheduledExecutor(daemon("turnstile-worker-" + n));
    this.ackSender = Executors.newSingleThreadExecutor(daemon("turnstile-acks-" + n));
    this.acks = new Acks();
  }

  private static java.util.concurrent.ThreadFactory daemon(String name) {
    AtomicInteger count = new AtomicInteger();
    return runnable -> {
      Thread thread = new Thread(runnable, name + "-" + count.incrementAndGet());
      thread.setDaemon(true);
      return thread;
    };
  }

  public String workerId() {
    return workerId;
  }

  public String queue() {
    return queue;
  }

  /** Asks {@link #run()} to drain and return. */
  public void stop() {
    stopped.countDown();
  }

  /** {@link #stop()}, then waits for the drain (when {@link #run()} runs on another thread). */
  @Override
  public void close() {
    stop();
    try {
      finished.await(options.drainTimeout.toMillis() + 30_000, TimeUnit.MILLISECONDS);
    } catch (InterruptedException err) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * Works the queue until {@link #stop()} (or SIGTERM/SIGINT, unless {@code
   * handleSignals(false)}), then drains: takes nothing new, lets running handlers finish
   * within the drain timeout, sends their acks, closes the stream and gives back what did
   * not finish. Throws the typed error of a stream the server refused (a bad queue name,
   * a wrong token).
   */
  public void run() {
    Runnable unhook = options.handleSignals ? Signals.onTermOrInt(this::stop) : () -> {};
    Thread reader = new Thread(this::consume, "turnstile-subscribe-" + queue);
    reader.setDaemon(true);
    reader.start();
    try {
      stopped.await();
    } catch (InterruptedException err) {
      Thread.currentThread().interrupt();
    }
    drain(reader);
    unhook.run();
    background.shutdownNow();
    ackSender.shutdownNow();
    if (ownExecutor) {
      executor.shutdownNow();
    }
    finished.countDown();
    if (refused != null) {
      throw refused;
    }
  }

  private void consume() {
    QueueServiceGrpc.QueueServiceBlockingStub stub = QueueServiceGrpc.newBlockingStub(rpc.channel);
    SubscribeRequest request = SubscribeRequest.newBuilder().setQueue(queue).setMaxInFlight(options.concurrency)
        .setVisibility(Rpc.duration(options.visibility)).setWorkerId(workerId).build();
    for (int attempt = 1; ; attempt++) {
      Context.CancellableContext context;
      synchronized (lock) {
        if (draining) {
          return;
        }
        context = Context.current().withCancellation();
        stream = context;
      }
      try {
        Iterator<SubscribeResponse> events = Rpc.within(context, () -> stub.subscribe(request));
        while (events.hasNext()) {
          SubscribeResponse m = events.next();
          attempt = 1;
          if (m.hasTask()) {
            deliver(m.getTask());
          } else if (m.hasCancelled()) {
            stopTask(m.getCancelled().getReceipt());
          }
        }
      } catch (StatusRuntimeException err) {
        if (context.isCancelled()) {
          return;
        }
        if (Rpc.isFinal(err.getStatus().getCode())) {
          refused = TurnstileException.of(err);
          stop();
          return;
        }
        LOG.log(Level.WARNING, "turnstile: the worker's stream on " + queue + " was cut; opening it again: "
            + err.getStatus().getCode() + " " + err.getStatus().getDescription());
      }
      if (context.isCancelled()) {
        return;
      }
      Rpc.sleep(Backoff.RETRY.delay(attempt));
    }
  }

  /** One handler at work. */
  private static final class Run {
    final Task task;
    /** Its end is not the handler's to report: its lease is gone, or the server cancelled it. */
    boolean lost;
    ScheduledFuture<?> extension;

    Run(Task task) {
      this.task = task;
    }
  }

  private record Nack(String receipt, Duration delay, String error, boolean giveUp) {}

  private void deliver(turnstile.v1.Common.Task wire) {
    Run run;
    synchronized (lock) {
      String receipt = wire.getReceipt();
      // A re-attached stream sends its kept deliveries again.
      if (running.containsKey(receipt) || cut.contains(receipt) || acks.has(receipt)) {
        return;
      }
      if (draining) {
        unstarted.add(receipt);
        return;
      }
      run = new Run(new Task(wire, queue));
      running.put(receipt, run);
    }
    executor.execute(() -> handle(run));
  }

  /**
   * The server cancelled a task this worker runs: its handler is told and its delivery
   * is ended now (a Nack, which the server turns into the task's end as cancelled).
   */
  private void stopTask(String receipt) {
    Nack nack;
    synchronized (lock) {
      Run run = running.get(receipt);
      if (run == null || run.lost) {
        return;
      }
      run.lost = true;
      run.task.cancelled.complete("the task was cancelled while it ran");
      nack = new Nack(receipt, Duration.ZERO, "cancelled while it ran", false);
      if (draining) {
        heldNacks.add(nack);
        return;
      }
    }
    background.execute(() -> nack(nack));
  }

  private void handle(Run run) {
    Task task = run.task;
    long every = options.visibility.toNanos() * 2 / 3;
    synchronized (lock) {
      run.extension = background.scheduleWithFixedDelay(() -> extend(run), every, every, TimeUnit.NANOSECONDS);
    }
    try {
      hook(() -> options.hooks.onStart(task));
      Throwable failure = null;
      try {
        handler.handle(task);
        byte[] result = task.handlerResult();
        if (result != null && result.length > MAX_RESULT_BYTES) {
          failure = new Fail("its result is " + result.length + " bytes, over the limit of " + MAX_RESULT_BYTES);
        }
      } catch (Throwable err) {
        failure = err;
      }
      synchronized (lock) {
        run.extension.cancel(false);
        if (run.lost || cut.contains(task.receipt())) {
          return;
        }
      }
      if (failure == null) {
        acks.add(task.receipt(), task.handlerResult());
        hook(() -> options.hooks.onSuccess(task));
        return;
      }
      Throwable error = failure;
      Duration delay = error instanceof Retry ? ((Retry) error).delay() : options.backoff.delay(task.attempt());
      if (error instanceof Retry) {
        hook(() -> options.hooks.onRetry(task, delay));
      }
      hook(() -> options.hooks.onFailure(task, error));
      Nack nack = new Nack(task.receipt(), delay, errorText(error), error instanceof Fail);
      synchronized (lock) {
        if (draining) {
          heldNacks.add(nack);
          return;
        }
      }
      if (nack(nack)) {
        hook(() -> options.hooks.onDead(task, error));
      }
    } finally {
      synchronized (lock) {
        running.remove(task.receipt());
        lock.notifyAll();
      }
    }
  }

  /** What a Nack says of a failure: a Retry's or Fail's message, else the stack trace (the server keeps 4 KiB). */
  private static String errorText(Throwable error) {
    String text;
    if (error instanceof Retry || error instanceof Fail) {
      text = error.getMessage();
    } else {
      StringWriter trace = new StringWriter();
      error.printStackTrace(new PrintWriter(trace));
      text = trace.toString();
    }
    byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
    if (bytes.length <= 4096) {
      return text;
    }
    int end = 4096;
    while (end > 0 && (bytes[end] & 0xC0) == 0x80) {
      end--;
    }
    return new String(bytes, 0, end, StandardCharsets.UTF_8);
  }

  private void hook(Runnable call) {
    try {
      call.run();
    } catch (RuntimeException err) {
      LOG.log(Level.DEBUG, "turnstile: a worker hook threw", err);
    }
  }

  /** Gives a delivery back; whether the task went DEAD. A failed Nack leaves it to its lease end. */
  private boolean nack(Nack nack) {
    try {
      NackRequest request = NackRequest.newBuilder().setQueue(queue).setReceipt(nack.receipt())
          .setDelay(Rpc.duration(nack.delay())).setError(nack.error()).setGiveUp(nack.giveUp()).build();
      return rpc.call(r -> r.queues.nack(request)).getDead();
    } catch (RuntimeException err) {
      LOG.log(Level.DEBUG, "turnstile: a nack failed; the delivery comes back at its lease end: " + err);
      return false;
    }
  }

  /**
   * Extends the delivery's lease (carrying the handler's progress); a stale receipt tells
   * the handler its lease is lost, a cancelled task stops it. A failed extension is tried
   * again at the next turn: the lease lasts a third of visibility more.
   */
  private void extend(Run run) {
    ExtendLeaseRequest.Builder request = ExtendLeaseRequest.newBuilder().setQueue(queue)
        .setReceipt(run.task.receipt()).setVisibility(Rpc.duration(options.visibility));
    byte[] progress = run.task.takeProgress();
    if (progress != null) {
      request.setProgress(ByteString.copyFrom(progress));
    }
    ExtendLeaseResponse reply;
    try {
      reply = rpc.call(options.visibility.dividedBy(3), r -> r.queues.extendLease(request.build()));
    } catch (RuntimeException err) {
      return;
    }
    if (reply.getCancelled()) {
      stopTask(run.task.receipt());
    } else if (!reply.getExtended()) {
      synchronized (lock) {
        run.lost = true;
        run.extension.cancel(false);
      }
      run.task.cancelled.complete("the task's lease was lost");
    }
  }

  private void drain(Thread reader) {
    synchronized (lock) {
      draining = true;
    }
    acks.hold();
    long end = System.nanoTime() + options.drainTimeout.toNanos();
    synchronized (lock) {
      while (!running.isEmpty() && System.nanoTime() < end) {
        try {
          lock.wait(Math.max(1, TimeUnit.NANOSECONDS.toMillis(end - System.nanoTime())));
        } catch (InterruptedException err) {
          Thread.currentThread().interrupt();
          break;
        }
      }
      for (Run run : running.values()) {
        cut.add(run.task.receipt());
        run.task.cancelled.complete("the worker's drain ran out of time");
      }
      if (stream != null) {
        stream.cancel(null);
      }
    }
    try {
      reader.join(10_000);
    } catch (InterruptedException err) {
      Thread.currentThread().interrupt();
    }
    acks.flush();
    List<Nack> back = new ArrayList<>();
    synchronized (lock) {
      for (String receipt : unstarted) {
        back.add(new Nack(receipt, Duration.ZERO, "", false));
      }
      for (String receipt : cut) {
        back.add(new Nack(receipt, Duration.ZERO, "", false));
      }
      back.addAll(heldNacks);
    }
    back.parallelStream().forEach(this::nack);
  }

  /** Acks sent as soon as no Ack is in flight, at most ACK_BATCH receipts each. */
  private final class Acks {
    private final List<String> pending = new ArrayList<>();
    private final Map<String, byte[]> results = new HashMap<>();
    private boolean held;
    private boolean sending;

    synchronized void add(String receipt, byte[] result) {
      pending.add(receipt);
      if (result != null) {
        results.put(receipt, result);
      }
      start();
    }

    /** Sends what is pending unless an Ack is in flight or acks are held. */
    private void start() {
      if (!held && !sending && !pending.isEmpty()) {
        sending = true;
        ackSender.execute(this::send);
      }
    }

    synchronized boolean has(String receipt) {
      return pending.contains(receipt);
    }

    private void send() {
      for (;;) {
        AckRequest.Builder request = AckRequest.newBuilder().setQueue(queue);
        int size;
        synchronized (this) {
          if (pending.isEmpty() || held) {
            sending = false;
            notifyAll();
            return;
          }
          List<String> batch = pending.subList(0, Math.min(ACK_BATCH, pending.size()));
          size = batch.size();
          for (String receipt : batch) {
            request.addReceipts(receipt);
            byte[] result = results.remove(receipt);
            if (result != null) {
              request.putResults(receipt, ByteString.copyFrom(result));
            }
          }
        }
        try {
          AckRequest built = request.build();
          rpc.call(r -> r.queues.ack(built));
        } catch (RuntimeException err) {
          // Unacked deliveries come back when their leases end: at least once, never lost.
          LOG.log(Level.WARNING, "turnstile: an ack failed; its tasks come back at their lease end: " + err);
        }
        synchronized (this) {
          // Receipts added while the Ack was in flight stay for the next one.
          pending.subList(0, size).clear();
        }
      }
    }

    synchronized void hold() {
      held = true;
    }

    /** Sends everything pending (also what was held) and waits until it is sent. */
    synchronized void flush() {
      held = false;
      start();
      while (sending) {
        try {
          wait();
        } catch (InterruptedException err) {
          Thread.currentThread().interrupt();
          return;
        }
      }
    }
  }

  /** SIGTERM and SIGINT handlers (sun.misc.Signal, reached by reflection: not a compile-time API). */
  static final class Signals {
    private Signals() {}

    /** Runs {@code action} on SIGTERM or SIGINT; the returned runnable puts the old handlers back. */
    static Runnable onTermOrInt(Runnable action) {
      try {
        Class<?> signal = Class.forName("sun.misc.Signal");
        Class<?> handlerType = Class.forName("sun.misc.SignalHandler");
        Object handler = Proxy.newProxyInstance(handlerType.getClassLoader(), new Class<?>[] {handlerType},
            (proxy, method, args) -> {
              if (method.getName().equals("handle")) {
                action.run();
              }
              return null;
            });
        List<Object[]> previous = new ArrayList<>();
        for (String name : new String[] {"TERM", "INT"}) {
          Object sig = signal.getConstructor(String.class).newInstance(name);
          previous.add(new Object[] {sig, signal.getMethod("handle", signal, handlerType).invoke(null, sig, handler)});
        }
        return () -> {
          for (Object[] pair : previous) {
            try {
              signal.getMethod("handle", signal, handlerType).invoke(null, pair[0], pair[1]);
            } catch (ReflectiveOperationException err) {
              LOG.log(Level.DEBUG, "turnstile: could not restore a signal handler", err);
            }
          }
        };
      } catch (ReflectiveOperationException | RuntimeException err) {
        LOG.log(Level.DEBUG, "turnstile: no signal handling here; stop() ends the worker", err);
        return () -> {};
      }
    }
  }
}
