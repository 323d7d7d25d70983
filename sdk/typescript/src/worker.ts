/**
 * The worker: one `Subscribe` stream, up to `concurrency` handlers at once, acks
 * coalesced, leases extended for long handlers, the stream re-attached by `workerId`
 * after a cut, and a drain that finishes what runs and acks nothing unfinished.
 *
 * The drain holds acks and nacks until the stream is closed: each one frees a slot the
 * server would fill with a new delivery that the draining worker must give back (an
 * attempt spent for nothing). Receipts stay valid after the close (the deliveries stay
 * leased to the `workerId` for the server's `--reattach-grace`), so the held acks and
 * nacks go right after it, and deliveries never started go back at once with a Nack.
 */
import type * as grpc from "@grpc/grpc-js";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";

import { Backoff, RETRY, duration, millis, payloadBytes, sleep, type DurationLike } from "./convert.js";
import { fromGrpcError } from "./errors.js";
import { FINAL, type Message, type Rpc } from "./rpc.js";
import { Abort, Fail, Retry, Task } from "./types.js";

/** The most receipts one Ack carries. */
export const ACK_BATCH = 128;

/** The most Acks in flight at once. */
const ACK_SENDERS = 2;

/** The most bytes a handler's result may hold (the server refuses more). */
export const MAX_RESULT_BYTES = 64 * 1024;

/** A handler's return value as its task's result: undefined and null are none, a Buffer
 * as it is, a string as UTF-8, anything else as JSON. */
export function resultBytes(value: unknown): Buffer | undefined {
  if (value === undefined || value === null) return undefined;
  return payloadBytes(value);
}

/** A Nack to send: the delivery, when it is due again, and why. */
interface Nack {
  receipt: string;
  delay: number;
  error: string;
  giveUp: boolean;
}

/** What a Nack says of a failure: its stack (name, message and frames) where it has one
 * (the server keeps the first 4 KiB). */
function errorText(error: unknown): string {
  if (error instanceof Retry || error instanceof Fail) return error.message;
  if (error instanceof Error) return error.stack ?? `${error.name}: ${error.message}`;
  return String(error);
}

export type Handler = (task: Task) => unknown;

/** Callbacks for the user's metrics and logs. */
export interface WorkerHooks {
  onStart?: (task: Task) => void;
  onSuccess?: (task: Task) => void;
  onFailure?: (task: Task, error: unknown) => void;
  onRetry?: (task: Task, delayMs: number) => void;
  onDead?: (task: Task, error: unknown) => void;
}

export interface WorkerOptions {
  concurrency?: number;
  visibility?: DurationLike;
  workerId?: string;
  backoff?: Backoff;
  drainTimeout?: DurationLike;
  hooks?: WorkerHooks;
  /** Drain on SIGTERM and SIGINT (default true). */
  handleSignals?: boolean;
}

/** `<host>-<pid>-<random>`: stable for the worker's life, unique across processes. */
export function defaultWorkerId(): string {
  return `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
}

interface Run {
  task: Task;
  abort: Abort;
  done: Promise<void>;
  /** Its end is not the handler's to report: its lease is gone, or the server
   * cancelled it (and its end was reported then). */
  lost: boolean;
}

/**
 * Receipts to ack: what finished in one turn of the event loop goes in one Ack (at most
 * ACK_BATCH receipts), with at most ACK_SENDERS Acks in flight; what finishes meanwhile
 * waits for the next. Deliveries of one stream read finish together, and an Ack of one
 * receipt and then one of seven cost the server and Redis two script runs where one would
 * do; a second Ack in flight lets the server refill the slots of one batch while the
 * worker runs the next (no-op handlers at concurrency 256: 23k tasks/s with one Ack of
 * at most 64 in flight, 30-34k with two of at most 128).
 */
class Acks {
  private pending: string[] = [];
  /** Receipts pending or in flight, to look one up without a scan. */
  readonly queued = new Set<string>();
  /** Results by receipt, sent with their acks. */
  private readonly results = new Map<string, Buffer>();
  held = false;
  private senders = 0;
  private scheduled = false;
  private idle: (() => void)[] = [];

  constructor(
    private readonly rpc: Rpc,
    private readonly queue: string,
  ) {}

  add(receipt: string, result?: Buffer): void {
    this.pending.push(receipt);
    this.queued.add(receipt);
    if (result !== undefined) this.results.set(receipt, result);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => {
        this.scheduled = false;
        this.pump();
      });
    }
  }

  private pump(): void {
    while (!this.held && this.pending.length && this.senders < ACK_SENDERS) {
      this.senders++;
      void this.send(this.pending.splice(0, ACK_BATCH));
    }
    if (this.senders === 0 && (this.held || !this.pending.length)) {
      for (const wake of this.idle.splice(0)) wake();
    }
  }

  private async send(batch: string[]): Promise<void> {
    const results: Record<string, Buffer> = {};
    for (const receipt of batch) {
      const result = this.results.get(receipt);
      if (result !== undefined) {
        results[receipt] = result;
        this.results.delete(receipt);
      }
    }
    try {
      await this.rpc.call(this.rpc.queues, "Ack", { queue: this.queue, receipts: batch, results });
    } catch {
      // Unacked deliveries come back when their leases end: at least once, not lost.
    }
    for (const receipt of batch) this.queued.delete(receipt);
    this.senders--;
    this.pump();
  }

  /** Sends everything pending (also what was held) and waits until it is sent. */
  async flush(): Promise<void> {
    this.held = false;
    const done = new Promise<void>((resolve) => this.idle.push(resolve));
    this.pump();
    await done;
  }
}

/**
 * Turns that fall due `every` ms after each entry's start and then after each turn ends,
 * on one timer for all entries (a timer per delivery was 3% of the worker's CPU per task
 * with no-op handlers, nearly all of them cleared before their first turn). Entries come
 * due in the order they were added or last turned, so the first is always the next.
 */
class Extensions<T> {
  private readonly due = new Map<T, number>();
  private timer: NodeJS.Timeout | undefined;
  private armedFor = Infinity;

  constructor(
    private readonly every: number,
    private readonly turn: (entry: T) => Promise<boolean>,
  ) {}

  add(entry: T): void {
    this.due.set(entry, Date.now() + this.every);
    this.arm();
  }

  delete(entry: T): void {
    this.due.delete(entry);
    if (this.due.size === 0 && this.timer) {
      // An armed timer would keep a drained worker's process alive until it fired.
      clearTimeout(this.timer);
      this.timer = undefined;
      this.armedFor = Infinity;
    }
  }

  private arm(): void {
    const first = this.due.values().next();
    if (first.done) return;
    if (this.timer && this.armedFor <= first.value) return;
    clearTimeout(this.timer);
    this.armedFor = first.value;
    this.timer = setTimeout(() => this.fire(), Math.max(0, first.value - Date.now()));
  }

  private fire(): void {
    this.timer = undefined;
    this.armedFor = Infinity;
    const now = Date.now();
    for (const [entry, at] of this.due) {
      if (at > now) break;
      this.due.delete(entry);
      void this.turn(entry).then((again) => again && this.add(entry));
    }
    this.arm();
  }
}

/** Runs `handler` on the queue's tasks; `run()` until `stop()` (or SIGTERM/SIGINT), then drains. */
export class Worker {
  readonly workerId: string;
  readonly concurrency: number;
  private readonly visibility: number;
  private readonly backoff: Backoff;
  private readonly drainTimeout: number;
  private readonly hooks: WorkerHooks;
  private readonly handleSignals: boolean;
  private readonly stopController = new AbortController();
  private readonly running = new Map<string, Run>();
  private readonly cut = new Set<string>();
  private readonly unstarted: string[] = [];
  private readonly heldNacks: Nack[] = [];
  private draining = false;
  private acks: Acks;
  /** Extends each running handler's lease at two thirds of `visibility`, again and again. */
  private readonly extensions: Extensions<Run>;
  private call: grpc.ClientReadableStream<Message> | undefined;

  constructor(
    private readonly rpc: Rpc,
    readonly queue: string,
    private readonly handler: Handler,
    options: WorkerOptions = {},
  ) {
    this.concurrency = options.concurrency ?? 1;
    if (this.concurrency < 1) throw new RangeError("concurrency: must be at least 1");
    this.visibility = millis(options.visibility ?? "30s", "visibility");
    this.workerId = options.workerId ?? defaultWorkerId();
    this.backoff = options.backoff ?? new Backoff();
    this.drainTimeout = millis(options.drainTimeout ?? "30s", "drainTimeout");
    this.hooks = options.hooks ?? {};
    this.handleSignals = options.handleSignals ?? true;
    this.acks = new Acks(rpc, queue);
    this.extensions = new Extensions((this.visibility * 2) / 3, (run) => this.extendLease(run));
  }

  /** Asks `run()` to drain and return. */
  stop(): void {
    this.stopController.abort();
  }

  /** `stop()`, then waits for the drain. */
  async close(): Promise<void> {
    this.stop();
    await this.finished;
  }

  private finished: Promise<void> = Promise.resolve();

  /**
   * Works the queue until `stop()`, then drains: takes nothing new, lets running
   * handlers finish within `drainTimeout`, sends their acks, closes the stream and
   * gives back what did not finish. Rejects with the typed error of a stream the server
   * refused (a bad queue name, a wrong token).
   */
  run(): Promise<void> {
    this.finished = this.work();
    return this.finished;
  }

  private async work(): Promise<void> {
    const onSignal = () => this.stop();
    if (this.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    try {
      const stopped = new Promise<void>((resolve) => {
        if (this.stopController.signal.aborted) resolve();
        this.stopController.signal.addEventListener("abort", () => resolve(), { once: true });
      });
      const consuming = this.consume();
      await Promise.race([consuming, stopped]);
      await this.drain();
      await consuming;
    } finally {
      if (this.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
      for (const run of this.running.values()) run.abort.abort(new Error("worker stopped"));
    }
  }

  private async consume(): Promise<void> {
    for (let attempt = 1; !this.draining; attempt++) {
      const call: grpc.ClientReadableStream<Message> = this.rpc.queues.Subscribe(
        {
          queue: this.queue,
          max_in_flight: this.concurrency,
          worker_id: this.workerId,
          visibility: duration(this.visibility),
        },
        this.rpc.metadata(),
      );
      this.call = call;
      try {
        for await (const message of call) {
          attempt = 1;
          if (message.event === "task") this.deliver(message.task);
          else if (message.event === "cancelled") this.stopTask(message.cancelled.receipt);
        }
      } catch (err) {
        if (this.draining) return;
        if (FINAL.has((err as grpc.ServiceError).code)) {
          this.stop();
          throw fromGrpcError(err);
        }
      }
      if (this.draining) return;
      await sleep(RETRY.delay(attempt));
    }
  }

  private deliver(wire: Message): void {
    const receipt: string = wire.receipt;
    if (this.running.has(receipt) || this.acks.queued.has(receipt) || this.cut.has(receipt)) {
      return; // a re-attached stream sends its kept deliveries again
    }
    if (this.draining) {
      this.unstarted.push(receipt);
      return;
    }
    const abort = new Abort();
    const run: Run = { task: new Task(wire, this.queue, abort), abort, done: Promise.resolve(), lost: false };
    this.running.set(receipt, run);
    run.done = this.handle(run);
  }

  /** The server cancelled a task this worker runs: its signal aborts, and its delivery
   * is ended now (a Nack, which the server turns into the task's end as cancelled);
   * what the handler does after is not reported. */
  private stopTask(receipt: string): void {
    const run = this.running.get(receipt);
    if (!run || run.lost) return;
    run.lost = true;
    run.abort.abort(new Error("the task was cancelled while it ran"));
    const nack: Nack = { receipt, delay: 0, error: "cancelled while it ran", giveUp: false };
    if (this.draining) this.heldNacks.push(nack);
    else void this.nack(nack);
  }

  private async handle(run: Run): Promise<void> {
    const { task } = run;
    this.extensions.add(run);
    this.hook(this.hooks.onStart, task);
    try {
      let outcome: { ok: true; result: Buffer | undefined } | { ok: false; error: unknown };
      try {
        const result = resultBytes(await this.handler(task));
        if (result !== undefined && result.length > MAX_RESULT_BYTES) {
          throw new Fail(`its result is ${result.length} bytes, over the limit of ${MAX_RESULT_BYTES}`);
        }
        outcome = { ok: true, result };
      } catch (error) {
        outcome = { ok: false, error };
      }
      // Its lease is gone, the server cancelled it, or the drain gave it back.
      if (run.lost || this.cut.has(task.receipt)) return;
      if (outcome.ok) {
        this.acks.add(task.receipt, outcome.result);
        this.hook(this.hooks.onSuccess, task);
        return;
      }
      const error = outcome.error;
      const delay = error instanceof Retry ? millis(error.delay, "delay") : this.backoff.delay(task.attempt);
      if (error instanceof Retry) this.hook(this.hooks.onRetry, task, delay);
      this.hook(this.hooks.onFailure, task, error);
      const nack: Nack = { receipt: task.receipt, delay, error: errorText(error), giveUp: error instanceof Fail };
      if (this.draining) {
        this.heldNacks.push(nack);
        return;
      }
      if (await this.nack(nack)) this.hook(this.hooks.onDead, task, error);
    } finally {
      this.extensions.delete(run);
      this.running.delete(task.receipt);
    }
  }

  private async nack(nack: Nack): Promise<boolean> {
    try {
      const reply = await this.rpc.call(this.rpc.queues, "Nack", {
        queue: this.queue,
        receipt: nack.receipt,
        delay: duration(nack.delay),
        error: nack.error,
        give_up: nack.giveUp,
      });
      return reply.dead;
    } catch {
      return false; // the delivery comes back when its lease ends
    }
  }

  /** One lease extension (a turn of `extensions`); a stale receipt aborts the handler's
   * signal. Returns whether the run goes on (to be extended again). */
  private async extendLease(run: Run): Promise<boolean> {
    try {
      const request: Message = { queue: this.queue, receipt: run.task.receipt, visibility: duration(this.visibility) };
      const progress = run.task.takeProgress();
      if (progress !== undefined) request.progress = progress;
      const reply = await this.rpc.call(this.rpc.queues, "ExtendLease", request, this.visibility / 3);
      if (!this.running.has(run.task.receipt)) return false;
      if (!reply.extended) {
        run.lost = true;
        run.abort.abort(new Error("the task's lease was lost"));
        return false;
      }
      if (reply.cancelled) {
        this.stopTask(run.task.receipt);
        return false;
      }
    } catch {
      // Tried again at the next turn; the lease lasts a third of visibility more.
    }
    return this.running.has(run.task.receipt);
  }

  private async drain(): Promise<void> {
    this.draining = true;
    this.acks.held = true;
    const runs = [...this.running.values()];
    if (runs.length) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, this.drainTimeout)));
      await Promise.race([Promise.all(runs.map((r) => r.done)), timeout]);
      clearTimeout(timer);
      for (const run of this.running.values()) {
        this.cut.add(run.task.receipt);
        run.abort.abort(new Error("the worker's drain ran out of time"));
      }
    }
    this.call?.cancel();
    await this.acks.flush();
    const back: Nack[] = [...this.unstarted, ...this.cut].map((receipt) => ({ receipt, delay: 0, error: "", giveUp: false }));
    await Promise.all([...back, ...this.heldNacks].map((nack) => this.nack(nack)));
  }

  private hook<A extends unknown[]>(hook: ((...args: A) => void) | undefined, ...args: A): void {
    try {
      hook?.(...args);
    } catch {
      // a user's hook must not stop the worker
    }
  }
}
