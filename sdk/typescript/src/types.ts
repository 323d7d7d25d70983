/** The values the library hands out and takes. */
import { instant } from "./convert.js";
import type { DurationLike, Payload, WireTimestamp } from "./convert.js";
import type { Message } from "./rpc.js";

export type TaskState = "delayed" | "ready" | "in_flight" | "dead" | "completed" | "cancelled";

const STATE_NAMES: Record<string, TaskState> = {
  TASK_STATE_DELAYED: "delayed",
  TASK_STATE_READY: "ready",
  TASK_STATE_IN_FLIGHT: "in_flight",
  TASK_STATE_DEAD: "dead",
  TASK_STATE_COMPLETED: "completed",
  TASK_STATE_CANCELLED: "cancelled",
};
export const STATE_WIRE: Record<TaskState, string> = {
  delayed: "TASK_STATE_DELAYED",
  ready: "TASK_STATE_READY",
  in_flight: "TASK_STATE_IN_FLIGHT",
  dead: "TASK_STATE_DEAD",
  completed: "TASK_STATE_COMPLETED",
  cancelled: "TASK_STATE_CANCELLED",
};

/** How a delivery ended. */
export type Outcome = "acked" | "nacked" | "expired" | "gave_up" | "cancelled";

const OUTCOME_NAMES: Record<string, Outcome> = {
  ATTEMPT_OUTCOME_ACKED: "acked",
  ATTEMPT_OUTCOME_NACKED: "nacked",
  ATTEMPT_OUTCOME_EXPIRED: "expired",
  ATTEMPT_OUTCOME_GAVE_UP: "gave_up",
  ATTEMPT_OUTCOME_CANCELLED: "cancelled",
};

/** One delivery of a task as its history keeps it. */
export interface Attempt {
  number: number;
  /** The Subscribe stream's `workerId` ("" for `Lease`). */
  workerId: string;
  leasedAt: Date | undefined;
  endedAt: Date | undefined;
  /** "expired": its lease ran out or its stream closed. */
  outcome: Outcome;
  error: string;
}

function attemptFrom(wire: Message): Attempt {
  return {
    number: wire.number,
    workerId: wire.worker_id ?? "",
    leasedAt: instant(wire.leased_at),
    endedAt: instant(wire.ended_at),
    outcome: OUTCOME_NAMES[wire.outcome] ?? "nacked",
    error: wire.error ?? "",
  };
}

/** The wire's bytes as a Buffer: the decoder's own Buffer as it is (no copy). */
function bytes(wire: Uint8Array | null | undefined): Buffer {
  if (!wire || wire.length === 0) return EMPTY;
  return Buffer.isBuffer(wire) ? wire : Buffer.from(wire);
}

const EMPTY = Buffer.alloc(0);

/**
 * A delivery's AbortSignal, made when a handler first reads it: most handlers never do,
 * and an AbortController per delivery was the worker's largest cost of its own (4% of
 * its CPU per task in a profile of no-op handlers at concurrency 256).
 */
export class Abort {
  private controller: AbortController | undefined;
  private reason: unknown;
  aborted = false;

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.controller?.abort(reason);
  }
}

/** A task as delivered to a worker (with `receipt` and `signal`) or as peeked. */
export class Task {
  readonly id: string;
  readonly payload: Buffer;
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly group: string;
  readonly priority: number;
  readonly state: TaskState;
  readonly receipt: string;
  /** Why its last delivery failed, as that Nack said ("" when none did). */
  readonly lastError: string;
  /** The latest progress a handler reported on it (`progress()`), as this delivery found
   * it: where a retry may resume (empty when none was reported). */
  readonly lastProgress: Buffer;
  /** Its deliveries that ended, oldest first (filled by `get`, `wait` and `call`). */
  readonly history: Attempt[];
  /** What its handler returned (a finished task, from `get` when kept, and `wait`). */
  readonly result: Buffer;
  private reported: Buffer | undefined;
  private readonly abort: Abort;
  /** Its times as the wire has them, made Dates when read (most handlers never do). */
  private readonly times: { enqueued_at?: WireTimestamp; due_at?: WireTimestamp; lease_expires_at?: WireTimestamp };

  constructor(wire: Message, readonly queue: string, abort?: Abort) {
    this.id = wire.id;
    this.payload = bytes(wire.payload);
    this.attempt = wire.attempt;
    this.maxAttempts = wire.max_attempts;
    this.group = wire.group;
    this.priority = wire.priority;
    this.state = STATE_NAMES[wire.state] ?? "ready";
    this.receipt = wire.receipt;
    this.lastError = wire.last_error ?? "";
    this.lastProgress = bytes(wire.progress);
    this.history = wire.history?.length ? wire.history.map(attemptFrom) : [];
    this.result = bytes(wire.result);
    this.abort = abort ?? new Abort();
    this.times = wire;
  }

  get enqueuedAt(): Date | undefined {
    return instant(this.times.enqueued_at);
  }

  get dueAt(): Date | undefined {
    return instant(this.times.due_at);
  }

  get leaseExpiresAt(): Date | undefined {
    return instant(this.times.lease_expires_at);
  }

  /** Aborted when this delivery's lease is lost, the task was cancelled while it ran
   * (`cancel(ids, { running: true })`), or the worker's drain ran out of time. */
  get signal(): AbortSignal {
    return this.abort.signal;
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

/** Which ended tasks a queue keeps: each at most `age` after it ended (0: no bound by
 * age) and at most the newest `count` (0: no bound by count); both 0 keep nothing. */
export interface Retention {
  age?: DurationLike;
  count?: number;
}

export interface QueueConfig {
  paused: boolean;
  maxInFlight: number;
  rateLimit: RateLimit | undefined;
  groupMaxInFlight: number;
  groupRateLimit: RateLimit | undefined;
  /** Which acked and cancelled tasks it keeps (undefined: none). */
  keepCompleted: { age: number; count: number } | undefined;
  /** Which DEAD tasks it keeps (undefined: all, until redriven or cancelled). */
  keepDead: { age: number; count: number } | undefined;
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
