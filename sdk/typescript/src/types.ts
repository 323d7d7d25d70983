/** The values the library hands out and takes. */
import { instant } from "./convert.js";
import type { DurationLike, Payload } from "./convert.js";
import type { Message } from "./rpc.js";

export type TaskState = "delayed" | "ready" | "in_flight" | "dead";

const STATE_NAMES: Record<string, TaskState> = {
  TASK_STATE_DELAYED: "delayed",
  TASK_STATE_READY: "ready",
  TASK_STATE_IN_FLIGHT: "in_flight",
  TASK_STATE_DEAD: "dead",
};
export const STATE_WIRE: Record<TaskState, string> = {
  delayed: "TASK_STATE_DELAYED",
  ready: "TASK_STATE_READY",
  in_flight: "TASK_STATE_IN_FLIGHT",
  dead: "TASK_STATE_DEAD",
};

/** A task as delivered to a worker (with `receipt` and `signal`) or as peeked. */
export class Task {
  readonly id: string;
  readonly payload: Buffer;
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly group: string;
  readonly priority: number;
  readonly enqueuedAt: Date | undefined;
  readonly dueAt: Date | undefined;
  readonly state: TaskState;
  readonly receipt: string;
  readonly leaseExpiresAt: Date | undefined;
  /** Why its last delivery failed, as that Nack said ("" when none did). */
  readonly lastError: string;
  /** The latest progress a handler reported on it (`progress()`), as this delivery found
   * it: where a retry may resume (empty when none was reported). */
  readonly lastProgress: Buffer;
  private reported: Buffer | undefined;
  /** Aborted when this delivery's lease is lost or the worker's drain ran out of time. */
  readonly signal: AbortSignal;

  constructor(wire: Message, readonly queue: string, signal?: AbortSignal) {
    this.id = wire.id;
    this.payload = Buffer.from(wire.payload ?? []);
    this.attempt = wire.attempt;
    this.maxAttempts = wire.max_attempts;
    this.group = wire.group;
    this.priority = wire.priority;
    this.enqueuedAt = instant(wire.enqueued_at);
    this.dueAt = instant(wire.due_at);
    this.state = STATE_NAMES[wire.state] ?? "ready";
    this.receipt = wire.receipt;
    this.leaseExpiresAt = instant(wire.lease_expires_at);
    this.lastError = wire.last_error ?? "";
    this.lastProgress = Buffer.from(wire.progress ?? []);
    this.signal = signal ?? new AbortController().signal;
  }

  /** Records the handler's latest word on a long task (at most 4 KiB): it rides on the
   * next lease extension and is kept with the task, so a later delivery's `lastProgress`
   * carries it. A newer report replaces one not sent yet. */
  progress(data: Buffer | string): void {
    this.reported = typeof data === "string" ? Buffer.from(data, "utf8") : data;
  }

  /** The progress reported and not yet sent (taken: the worker sends it). */
  takeProgress(): Buffer | undefined {
    const reported = this.reported;
    this.reported = undefined;
    return reported;
  }

  text(): string {
    return this.payload.toString("utf8");
  }

  json<T = unknown>(): T {
    return JSON.parse(this.text()) as T;
  }
}

/** One task for `enqueue` / `enqueueMany`. */
export interface TaskSpec {
  payload?: Payload;
  id?: string;
  delay?: DurationLike;
  at?: Date;
  group?: string;
  priority?: number;
  maxAttempts?: number;
  dedupeWindow?: DurationLike;
  onDuplicate?: "keep" | "replace";
}

/** What `enqueue` did: the id (made by the library when none was given), whether it was stored. */
export interface Enqueued {
  id: string;
  created: boolean;
  replaced: boolean;
  dueAt: Date | undefined;
}

/** At most `limit` starts per `period` (ms), `burst` at once (0: = limit). */
export interface RateLimit {
  limit: number;
  period?: DurationLike;
  burst?: number;
}

export interface QueueConfig {
  paused: boolean;
  maxInFlight: number;
  rateLimit: RateLimit | undefined;
  groupMaxInFlight: number;
  groupRateLimit: RateLimit | undefined;
}

export interface Stats {
  ready: number;
  delayed: number;
  inFlight: number;
  dead: number;
  oldestReadyAt: Date | undefined;
  nextDueAt: Date | undefined;
  config: QueueConfig;
}

/** One state of a watched lock. */
export interface LockState {
  held: boolean;
  owner: string;
  fencingToken: bigint;
  expiresAt: Date | undefined;
}

export interface Schedule {
  name: string;
  queue: string;
  cron: string;
  every: number | undefined;
  timeZone: string;
  payload: Buffer;
  overlap: "allow" | "skip";
  catchUp: number | undefined;
  paused: boolean;
  nextFireAt: Date | undefined;
  lastFireAt: Date | undefined;
}

/** Throw from a handler to give the task back, due again after `delay`. */
/** Throw from a handler to give up on the task: DEAD now, whatever attempts remain, with
 * `reason` as its last error. */
export class Fail extends Error {
  constructor(readonly reason: string) {
    super(reason);
    this.name = "Fail";
  }
}

export class Retry extends Error {
  constructor(
    readonly delay: DurationLike = 0,
    reason = "",
  ) {
    super(reason || `retry after ${delay}`);
    this.name = "Retry";
  }
}
