/**
 * A queue's calls, typed. Enqueue fills every missing task id with a random one before
 * the first try, so a call retried through UNAVAILABLE can never store a task twice.
 */
import { randomUUID } from "node:crypto";

import { duration, instant, millis, payloadBytes, timestamp, type DurationLike, type Payload } from "./convert.js";
import { DeadlineExceeded, InvalidArgument, TaskFailed } from "./errors.js";
import type { Message, Rpc } from "./rpc.js";
import { STATE_WIRE, Task, type Enqueued, type QueueConfig, type RateLimit, type Retention, type Stats, type TaskSpec, type TaskState } from "./types.js";

/** How much longer than a wait's own timeout its call may take (ms): the server answers
 * "not done" at the timeout, and that answer must not be cut by the call's deadline. */
const WAIT_MARGIN = 5000;

function wireSpec(spec: TaskSpec): Message {
  const onDuplicate = spec.onDuplicate ?? "keep";
  if (onDuplicate !== "keep" && onDuplicate !== "replace") {
    throw new InvalidArgument(`onDuplicate: "${onDuplicate}" is not "keep" or "replace"`);
  }
  if (spec.delay !== undefined && spec.at !== undefined) throw new InvalidArgument("delay: give delay or at, not both");
  const wire: Message = {
    id: spec.id || randomUUID().replaceAll("-", ""),
    payload: payloadBytes(spec.payload ?? Buffer.alloc(0)),
    on_duplicate: onDuplicate === "keep" ? "DUPLICATE_POLICY_KEEP" : "DUPLICATE_POLICY_REPLACE",
    max_attempts: spec.maxAttempts ?? 0,
    group: spec.group ?? "",
    priority: spec.priority ?? 0,
  };
  if (spec.delay !== undefined) wire.delay = duration(spec.delay, "delay");
  if (spec.at !== undefined) wire.due_at = timestamp(spec.at);
  if (spec.dedupeWindow !== undefined) wire.dedupe_window = duration(spec.dedupeWindow, "dedupeWindow");
  return wire;
}

function wireRate(limit: RateLimit): Message {
  return { limit: limit.limit, burst: limit.burst ?? 0, period: duration(limit.period ?? 1000, "period") };
}

function rateFrom(wire: Message): RateLimit | undefined {
  if (!wire || !wire.limit) return undefined;
  return { limit: wire.limit, period: millis(Number(wire.period?.seconds ?? 0) * 1000 + (wire.period?.nanos ?? 0) / 1e6) || 1000, burst: wire.burst };
}

export function configFrom(wire: Message): QueueConfig {
  return {
    paused: wire.paused,
    maxInFlight: wire.max_in_flight,
    rateLimit: rateFrom(wire.rate_limit),
    groupMaxInFlight: wire.group_max_in_flight,
    groupRateLimit: rateFrom(wire.group_rate_limit),
    keepCompleted: retentionFrom(wire.keep_completed),
    keepDead: retentionFrom(wire.keep_dead),
  };
}

function retentionFrom(wire: Message): { age: number; count: number } | undefined {
  if (!wire) return undefined;
  return { age: Number(wire.age?.seconds ?? 0) * 1000 + (wire.age?.nanos ?? 0) / 1e6, count: wire.count };
}

function wireRetention(keep: Retention, field: string): Message {
  const wire: Message = { count: keep.count ?? 0 };
  if (keep.age !== undefined) wire.age = duration(keep.age, `${field}.age`);
  return wire;
}

/** One queue of the client's tenant. */
export class Queue {
  constructor(
    private readonly rpc: Rpc,
    readonly name: string,
  ) {}

  /** Adds one task (a Buffer as it is, a string as UTF-8, anything else as JSON). */
  async enqueue(payload: Payload = Buffer.alloc(0), options: Omit<TaskSpec, "payload"> = {}): Promise<Enqueued> {
    return (await this.enqueueMany([{ ...options, payload }]))[0];
  }

  /** Adds 1-1000 tasks atomically; one `Enqueued` per spec, in order. */
  async enqueueMany(specs: TaskSpec[]): Promise<Enqueued[]> {
    const reply = await this.rpc.call(this.rpc.queues, "Enqueue", { queue: this.name, tasks: specs.map(wireSpec) });
    return reply.results.map((r: Message) => ({ id: r.id, created: r.created, replaced: r.replaced, dueAt: instant(r.due_at) }));
  }

  async stats(): Promise<Stats> {
    const r = await this.rpc.call(this.rpc.queues, "Stats", { queue: this.name });
    return {
      ready: Number(r.ready),
      delayed: Number(r.delayed),
      inFlight: Number(r.in_flight),
      dead: Number(r.dead),
      oldestReadyAt: instant(r.oldest_ready_at),
      nextDueAt: instant(r.next_due_at),
      config: configFrom(r.config ?? {}),
    };
  }

  /** Tasks of one state in delivery order, without taking them. */
  async peek(state: TaskState = "ready", limit = 10): Promise<Task[]> {
    if (!(state in STATE_WIRE)) throw new InvalidArgument(`state: "${state}" is not one of ${Object.keys(STATE_WIRE).join(", ")}`);
    const reply = await this.rpc.call(this.rpc.queues, "Peek", { queue: this.name, state: STATE_WIRE[state], limit });
    return reply.tasks.map((t: Message) => new Task(t, this.name));
  }

  /** Removes tasks that are not in flight; with `running`, also cancels those in flight
   * (their workers' handlers' signals abort; they end "cancelled"). The ids removed or
   * cancelled. */
  async cancel(ids: string[], options: { running?: boolean } = {}): Promise<string[]> {
    return (await this.rpc.call(this.rpc.queues, "Cancel", { queue: this.name, ids, running: options.running ?? false })).cancelled;
  }

  /** The task in whatever state, with its delivery history, last error, progress and (a
   * kept completed task) result; `NotFound` when the queue does not hold it. */
  async get(id: string): Promise<Task> {
    return new Task(await this.rpc.call(this.rpc.queues, "GetTask", { queue: this.name, id }), this.name);
  }

  /** Waits up to `timeout` (at most 1 h) for the task to be done (completed, dead or
   * cancelled): the task as it ended, with its result and history, or undefined when it
   * was not done in time. */
  async wait(id: string, timeout: DurationLike): Promise<Task | undefined> {
    const ms = millis(timeout, "timeout");
    const reply = await this.rpc.call(this.rpc.queues, "Wait", { queue: this.name, id, timeout: duration(ms, "timeout") }, ms + WAIT_MARGIN);
    return reply.done ? new Task(reply.task, this.name) : undefined;
  }

  /** A remote call through the queue: enqueues one task and waits up to `timeout` (at
   * most 1 h) for a worker's result. The id is made before the first try, so a retried
   * call joins the task its first try made. A task that went dead or was cancelled
   * rejects with `TaskFailed` and its last error; one not done in time, with
   * `DeadlineExceeded`. */
  async call(payload: Payload, timeout: DurationLike, options: Omit<TaskSpec, "payload" | "delay" | "at"> = {}): Promise<Buffer> {
    const ms = millis(timeout, "timeout");
    const request = { queue: this.name, tasks: [wireSpec({ ...options, payload })], wait: duration(ms, "timeout") };
    const reply = await this.rpc.call(this.rpc.queues, "Enqueue", request, ms + WAIT_MARGIN);
    const result = reply.results[0];
    if (!result.done) throw new DeadlineExceeded(`task ${result.id} not done within ${ms} ms`);
    const task = new Task(result.task, this.name);
    if (task.state !== "completed") throw new TaskFailed(task.id, task.state, task.lastError);
    return task.result;
  }

  /** Moves DEAD tasks (these, or all) back to READY; how many moved. */
  async redrive(ids: string[] = []): Promise<number> {
    return Number((await this.rpc.call(this.rpc.queues, "Redrive", { queue: this.name, ids })).redriven);
  }

  /** Stops deliveries of the queue, or of one group ("" is the ungrouped tasks). */
  async pause(group?: string): Promise<void> {
    await this.setPaused(group, true);
  }

  async resume(group?: string): Promise<void> {
    await this.setPaused(group, false);
  }

  private async setPaused(group: string | undefined, paused: boolean): Promise<void> {
    if (group === undefined) await this.rpc.call(this.rpc.queues, "ConfigureQueue", { queue: this.name, paused });
    else await this.rpc.call(this.rpc.queues, "ConfigureGroup", { queue: this.name, group, paused });
  }

  /** Changes the fields given (a rate limit of 0 removes it); the config now. */
  async configure(change: {
    paused?: boolean;
    maxInFlight?: number;
    groupMaxInFlight?: number;
    rateLimit?: RateLimit;
    groupRateLimit?: RateLimit;
    /** Keep acked and cancelled tasks; `{}` keeps nothing. */
    keepCompleted?: Retention;
    /** Keep DEAD tasks this long or this many; `{}` keeps them all (the default). */
    keepDead?: Retention;
  }): Promise<QueueConfig> {
    const request: Message = { queue: this.name };
    if (change.paused !== undefined) request.paused = change.paused;
    if (change.maxInFlight !== undefined) request.max_in_flight = change.maxInFlight;
    if (change.groupMaxInFlight !== undefined) request.group_max_in_flight = change.groupMaxInFlight;
    if (change.rateLimit) request.rate_limit = wireRate(change.rateLimit);
    if (change.groupRateLimit) request.group_rate_limit = wireRate(change.groupRateLimit);
    if (change.keepCompleted) request.keep_completed = wireRetention(change.keepCompleted, "keepCompleted");
    if (change.keepDead) request.keep_dead = wireRetention(change.keepDead, "keepDead");
    return configFrom((await this.rpc.call(this.rpc.queues, "ConfigureQueue", request)).config);
  }
}
