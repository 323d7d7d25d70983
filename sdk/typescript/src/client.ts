/** `Client`: one channel to turnstile; every call returns a promise. */
import { hostname } from "node:os";
import type * as grpc from "@grpc/grpc-js";

import { RETRY, instant, millis, sleep, type DurationLike } from "./convert.js";
import { NotAcquired, fromGrpcError } from "./errors.js";
import { Lease, LockKind, SemaphoreKind, acquire, type HoldKind } from "./lease.js";
import { Queue } from "./queue.js";
import { Rpc, type ClientOptions, type Message } from "./rpc.js";
import { Schedules } from "./schedules.js";
import type { LockState } from "./types.js";
import { Worker, type Handler, type WorkerOptions } from "./worker.js";

const DEFAULT_TTL = "15s";

/** `<host>-<pid>`: who holds a lease when the caller names nobody. */
export function defaultOwner(): string {
  return `${hostname()}-${process.pid}`;
}

export interface LockOptions {
  ttl?: DurationLike;
  /** How long to wait; undefined waits without end. */
  wait?: DurationLike;
  owner?: string;
}

export interface SemaphoreOptions extends LockOptions {
  limit: number;
  permits?: number;
}

/**
 * One channel to turnstile. `server`, `token` and `caCert` default to
 * `TURNSTILE_SERVER` (else http://127.0.0.1:50051), `TURNSTILE_TOKEN` and
 * `TURNSTILE_CA_CERT` (a PEM file). `close()` releases held leases and the channel.
 */
export class Client {
  /** The generated stubs on this client's channel (`raw.locks`, `raw.queues`, …) and `raw.metadata()`. */
  readonly raw: Rpc;
  readonly schedules: Schedules;
  private readonly leases = new Set<Lease>();

  constructor(options: ClientOptions = {}) {
    this.raw = new Rpc(options);
    this.schedules = new Schedules(this.raw);
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.leases].map((lease) => lease.release()));
    this.raw.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Takes the lock, waiting up to `wait` (none: without end); rejects with `NotAcquired` when it runs out. */
  async lock(name: string, options: LockOptions = {}): Promise<Lease> {
    const kind = new LockKind(name, options.owner ?? defaultOwner(), millis(options.ttl ?? DEFAULT_TTL, "ttl"));
    return this.hold(kind, options.wait === undefined ? undefined : millis(options.wait, "wait"));
  }

  /** One attempt: the lease, or undefined when the lock is held. */
  async tryLock(name: string, options: Omit<LockOptions, "wait"> = {}): Promise<Lease | undefined> {
    try {
      return await this.lock(name, { ...options, wait: 0 });
    } catch (err) {
      if (err instanceof NotAcquired) return undefined;
      throw err;
    }
  }

  /** Waits without end until this process leads; the lease's `lost` aborts only after having led. */
  async campaign(name: string, owner: string, ttl: DurationLike = DEFAULT_TTL): Promise<Lease> {
    return this.lock(name, { owner, ttl });
  }

  /** Takes `permits` of the semaphore (first come, first served), waiting up to `wait`. */
  async semaphore(name: string, options: SemaphoreOptions): Promise<Lease> {
    const kind = new SemaphoreKind(
      name,
      options.owner ?? defaultOwner(),
      millis(options.ttl ?? DEFAULT_TTL, "ttl"),
      options.limit,
      options.permits ?? 1,
    );
    return this.hold(kind, options.wait === undefined ? undefined : millis(options.wait, "wait"));
  }

  private async hold(kind: HoldKind, wait: number | undefined): Promise<Lease> {
    const got = await acquire(this.raw, kind, wait);
    if (!got) throw new NotAcquired(kind.name);
    const lease = new Lease(this.raw, kind, ...got);
    this.leases.add(lease);
    return lease;
  }

  /** Whether `name` is held now under exactly this fencing token. */
  async checkFence(name: string, fencingToken: bigint | number): Promise<boolean> {
    const reply = await this.raw.call(this.raw.locks, "CheckFence", { name, fencing_token: String(fencingToken) });
    return reply.current;
  }

  /**
   * The lock's state now, then each change (`for await`); re-opened after a cut, never
   * going back to an older fencing token. Stops when `signal` aborts or the loop breaks.
   */
  async *watch(name: string, signal?: AbortSignal): AsyncGenerator<LockState> {
    let last: LockState | undefined;
    let newest = 0n;
    for (let attempt = 1; !signal?.aborted; attempt++) {
      const call: grpc.ClientReadableStream<Message> = this.raw.locks.Watch({ name }, this.raw.metadata());
      const cancel = () => call.cancel();
      signal?.addEventListener("abort", cancel, { once: true });
      try {
        for await (const message of call) {
          attempt = 1;
          let state: LockState;
          if (message.event === "held") {
            const token = BigInt(message.held.fencing_token);
            if (token < newest) continue;
            newest = token;
            state = { held: true, owner: message.held.owner, fencingToken: token, expiresAt: instant(message.held.expires_at) };
          } else if (message.event === "free") {
            const token = BigInt(message.free.fencing_token);
            if (token < newest) continue;
            state = { held: false, owner: "", fencingToken: token, expiresAt: undefined };
          } else {
            continue;
          }
          if (!last || last.held !== state.held || last.owner !== state.owner || last.fencingToken !== state.fencingToken) {
            last = state;
            yield state;
          }
        }
      } catch (err) {
        if (signal?.aborted) return;
        if ((err as grpc.ServiceError).code !== 14 /* UNAVAILABLE */) throw fromGrpcError(err);
      } finally {
        signal?.removeEventListener("abort", cancel);
        call.cancel();
      }
      await sleep(RETRY.delay(attempt)).catch(() => undefined);
    }
  }

  queue(name: string): Queue {
    return new Queue(this.raw, name);
  }

  /** A worker running `handler(task)` on the queue's tasks; `await worker.run()`. */
  worker(queue: string, handler: Handler, options: WorkerOptions = {}): Worker {
    return new Worker(this.raw, queue, handler, options);
  }
}
