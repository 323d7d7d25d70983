package dev.turnstile.client;

import java.time.Duration;
import java.util.concurrent.ExecutorService;

/** A worker's settings; unset ones take the defaults. */
public final class WorkerOptions {
  int concurrency = 1;
  Duration visibility = Duration.ofSeconds(30);
  String workerId;
  Backoff backoff = Backoff.DEFAULT;
  Duration drainTimeout = Duration.ofSeconds(30);
  WorkerHooks hooks = new WorkerHooks() {};
  ExecutorService executor;
  boolean handleSignals = true;

  public static WorkerOptions defaults() {
    return new WorkerOptions();
  }

  /** How many handlers run at once (default 1). */
  public WorkerOptions concurrency(int concurrency) {
    if (concurrency < 1) {
      throw new IllegalArgumentException("concurrency: must be at least 1");
    }
    this.concurrency = concurrency;
    return this;
  }

  /** Each delivery's lease (default 30 s), extended at two thirds while its handler runs. */
  public WorkerOptions visibility(Duration visibility) {
    this.visibility = visibility;
    return this;
  }

  /** The worker's name (default {@code <host>-<pid>-<random>}): a cut stream re-attaches by it. */
  public WorkerOptions workerId(String workerId) {
    this.workerId = workerId;
    return this;
  }

  /** The delay before a failed task's next attempt (default {@link Backoff#DEFAULT}). */
  public WorkerOptions backoff(Backoff backoff) {
    this.backoff = backoff;
    return this;
  }

  /** How long running handlers may finish once the worker stops (default 30 s). */
  public WorkerOptions drainTimeout(Duration drainTimeout) {
    this.drainTimeout = drainTimeout;
    return this;
  }

  public WorkerOptions hooks(WorkerHooks hooks) {
    this.hooks = hooks;
    return this;
  }

  /**
   * Where handlers run (default: a pool of {@code concurrency} daemon threads, shut down
   * with the worker; one you pass stays yours).
   */
  public WorkerOptions executor(ExecutorService executor) {
    this.executor = executor;
    return this;
  }

  /** Whether {@link Worker#run()} drains on SIGTERM and SIGINT (default true). */
  public WorkerOptions handleSignals(boolean handleSignals) {
    this.handleSignals = handleSignals;
    return this;
  }
}
