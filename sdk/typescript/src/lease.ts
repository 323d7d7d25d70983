/**
 * Leases held through a `Hold` stream (locks, semaphore permits, leadership): renewed by
 * the server while the stream is open, re-attached by token after a cut (any replica),
 * released on `release()`, and `lost` aborted only when the lease is really gone. A cut
 * stream is not a lost lease: the lease runs on in Redis until its TTL, so the keeper
 * re-opens `Hold` with the lease's token until a replica answers (nothing fires) or the
 * lease's end passes (then `lost` aborts).
 */
import type * as grpc from "@grpc/grpc-js";

import { RETRY, WireDuration, duration, instant, sleep } from "./convert.js";
import { LeaseLost, fromGrpcError } from "./errors.js";
import { FINAL, Message, Rpc } from "./rpc.js";

/** The longest wait (ms) one Hold takes (the server's bound); longer waits re-ask. */
export const MAX_WAIT = 3_600_000;

/** What is held: opens its Hold stream and releases by token. */
export interface HoldKind {
  readonly name: string;
  readonly owner: string;
  readonly ttl: number;
  hold(rpc: Rpc, token: string, wait: number): grpc.ClientReadableStream<Message>;
  release(rpc: Rpc, token: string): Promise<boolean>;
}

export class LockKind implements HoldKind {
  constructor(
    readonly name: string,
    readonly owner: string,
    readonly ttl: number,
  ) {}
  hold(rpc: Rpc, token: string, wait: number) {
    return rpc.locks.Hold(
      { name: this.name, owner: this.owner, token, ttl: ms(this.ttl), wait: duration(wait) },
      rpc.metadata(),
    );
  }
  async release(rpc: Rpc, token: string) {
    return (await rpc.call(rpc.locks, "Release", { name: this.name, token })).released as boolean;
  }
}

export class SemaphoreKind implements HoldKind {
  constructor(
    readonly name: string,
    readonly owner: string,
    readonly ttl: number,
    readonly limit: number,
    readonly permits: number,
  ) {}
  hold(rpc: Rpc, token: string, wait: number) {
    return rpc.semaphores.Hold(
      {
        name: this.name,
        owner: this.owner,
        limit: this.limit,
        permits: this.permits,
        token,
        ttl: ms(this.ttl),
        wait: duration(wait),
      },
      rpc.metadata(),
    );
  }
  async release(rpc: Rpc, token: string) {
    return (await rpc.call(rpc.semaphores, "Release", { name: this.name, token })).released as boolean;
  }
}

function ms(value: number): WireDuration {
  return duration(Math.max(1, Math.round(value)));
}

type Reader = AsyncIterator<Message>;

/** The next `acquired` or `lost` event (heartbeats skipped); undefined when the stream ended. */
async function firstEvent(reader: Reader): Promise<Message | undefined> {
  for (;;) {
    const next = await reader.next();
    if (next.done) return undefined;
    if (next.value.event === "acquired" || next.value.event === "lost") return next.value;
  }
}

/**
 * A held lease. `lost` aborts (with a `LeaseLost` reason) when the lease is gone while
 * held: expired while no replica could be reached, taken over after expiry, or released
 * by `ReleaseAll`; never for a re-attach that kept the lease.
 */
export class Lease {
  readonly name: string;
  readonly owner: string;
  readonly token: string;
  readonly fencingToken: bigint;
  expiresAt: Date | undefined;
  private readonly lostController = new AbortController();
  private released = false;
  private ends = 0;

  constructor(
    private readonly rpc: Rpc,
    private readonly kind: HoldKind,
    private call: grpc.ClientReadableStream<Message>,
    reader: Reader,
    acquired: Message,
  ) {
    this.name = kind.name;
    this.owner = kind.owner;
    this.token = acquired.token;
    this.fencingToken = BigInt(acquired.fencing_token);
    this.renewed(acquired.expires_at);
    void this.keep(reader);
  }

  /** Aborted when the lease is lost; its reason is the `LeaseLost` error. */
  get lost(): AbortSignal {
    return this.lostController.signal;
  }

  get lostReason(): string | undefined {
    return this.lost.aborted ? (this.lost.reason as LeaseLost).reason : undefined;
  }

  /** Throws `LeaseLost` if the lease is gone. */
  check(): void {
    if (this.lost.aborted) throw this.lost.reason;
  }

  /** Frees the lease (only this holder's); true when this call freed it. */
  async release(): Promise<boolean> {
    if (this.released) return false;
    this.released = true;
    let freed = false;
    // Release first, then close the stream: closing it frees the lease too, and a close
    // that won the race would make the Release answer false.
    if (!this.lost.aborted) {
      try {
        freed = await this.kind.release(this.rpc, this.token);
      } catch {
        // Closing the stream below frees it once the server sees the close.
      }
    }
    this.call.cancel();
    return freed;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  private renewed(expiresAt: Message): void {
    const when = instant(expiresAt);
    this.expiresAt = when;
    let ends = performance.now() + this.kind.ttl;
    if (when) ends = Math.min(ends, performance.now() + (when.getTime() - Date.now()));
    this.ends = ends;
  }

  private lose(reason: string): void {
    if (this.released || this.lost.aborted) return;
    this.lostController.abort(new LeaseLost(this.name, reason));
  }

  private async keep(reader: Reader): Promise<void> {
    let current: Reader | undefined = reader;
    while (current && !this.released) {
      try {
        for (;;) {
          const next = await current.next();
          if (next.done) break;
          const message = next.value;
          if (message.event === "renewed") this.renewed(message.renewed.expires_at);
          else if (message.event === "acquired") this.renewed(message.acquired.expires_at);
          else if (message.event === "lost") return this.lose(message.lost.reason);
        }
      } catch (err) {
        if (this.released) return;
        const code = (err as grpc.ServiceError).code;
        if (FINAL.has(code)) return this.lose(fromGrpcError(err).message);
      }
      if (this.released) return;
      current = await this.reattach();
    }
  }

  /** A new stream holding the same lease, or undefined (lost) once its end passed. */
  private async reattach(): Promise<Reader | undefined> {
    for (let attempt = 1; !this.released; attempt++) {
      const left = this.ends - performance.now();
      if (left <= 0) {
        this.lose("the lease ran out while no replica answered");
        return undefined;
      }
      const call = this.kind.hold(this.rpc, this.token, 0);
      this.call = call;
      const reader = call[Symbol.asyncIterator]();
      let first: Message | undefined;
      try {
        first = await firstEvent(reader);
      } catch (err) {
        if (FINAL.has((err as grpc.ServiceError).code)) {
          this.lose(fromGrpcError(err).message);
          return undefined;
        }
      }
      if (first?.event === "lost") {
        this.lose(first.lost.reason);
        return undefined;
      }
      if (first?.event === "acquired") {
        this.renewed(first.acquired.expires_at);
        return reader;
      }
      await sleep(Math.min(RETRY.delay(attempt), Math.max(0, left)));
    }
    return undefined;
  }
}

/**
 * Opens Hold streams until one acquires (its stream, reader and `acquired` event),
 * `wait` (ms) runs out (undefined; `wait` undefined waits without end), or a final error.
 */
export async function acquire(
  rpc: Rpc,
  kind: HoldKind,
  wait: number | undefined,
): Promise<[grpc.ClientReadableStream<Message>, Reader, Message] | undefined> {
  const end = wait === undefined ? undefined : performance.now() + wait;
  for (let attempt = 1; ; attempt++) {
    const left = end === undefined ? MAX_WAIT : Math.max(0, end - performance.now());
    const call = kind.hold(rpc, "", Math.min(left, MAX_WAIT));
    const reader = call[Symbol.asyncIterator]();
    let first: Message | undefined;
    try {
      first = await firstEvent(reader);
    } catch (err) {
      if (FINAL.has((err as grpc.ServiceError).code) || (end !== undefined && performance.now() >= end)) {
        throw fromGrpcError(err);
      }
      await sleep(RETRY.delay(attempt));
      continue;
    }
    if (first?.event === "acquired") return [call, reader, first.acquired];
    call.cancel();
    if (end !== undefined && performance.now() >= end) return undefined;
    if (first === undefined || wait === undefined || first.lost.reason !== "not acquired") {
      let pause = RETRY.delay(attempt);
      if (end !== undefined) pause = Math.min(pause, Math.max(0, end - performance.now()));
      await sleep(pause);
    }
  }
}
