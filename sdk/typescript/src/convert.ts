/** Durations, instants and payloads between JavaScript and the wire. */
import { InvalidArgument } from "./errors.js";

/** A duration: milliseconds as a number, or a string like "30s", "250ms", "1h30m". */
export type DurationLike = number | string;

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Milliseconds in `value`; InvalidArgument naming `field` for anything else. */
export function millis(value: DurationLike, field = "duration"): number {
  let ms: number;
  if (typeof value === "number") {
    ms = value;
  } else if (typeof value === "string") {
    const parts = [...value.trim().matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)];
    if (!value.trim() || parts.map((p) => p[0]).join("") !== value.trim()) {
      throw new InvalidArgument(`${field}: "${value}" is not a duration like "30s", "250ms", "1h30m"`);
    }
    ms = parts.reduce((sum, p) => sum + Number(p[1]) * UNITS[p[2]], 0);
  } else {
    throw new InvalidArgument(`${field}: a duration, not ${typeof value}`);
  }
  if (!Number.isFinite(ms) || ms < 0) throw new InvalidArgument(`${field}: must not be negative`);
  return ms;
}

export interface WireDuration {
  seconds: string | number;
  nanos: number;
}

export function duration(value: DurationLike, field = "duration"): WireDuration {
  const ms = millis(value, field);
  const seconds = Math.floor(ms / 1000);
  return { seconds: String(seconds), nanos: Math.round((ms - seconds * 1000) * 1e6) };
}

export interface WireTimestamp {
  seconds: string | number;
  nanos: number;
}

export function timestamp(date: Date): WireTimestamp {
  const ms = date.getTime();
  const seconds = Math.floor(ms / 1000);
  return { seconds: String(seconds), nanos: (ms - seconds * 1000) * 1e6 };
}

/** A Date, or undefined for an unset or zero timestamp. */
export function instant(stamp: WireTimestamp | null | undefined): Date | undefined {
  if (!stamp) return undefined;
  const seconds = Number(stamp.seconds);
  if (seconds === 0 && !stamp.nanos) return undefined;
  return new Date(seconds * 1000 + Math.floor(stamp.nanos / 1e6));
}

/** What a task carries: a Buffer/Uint8Array as it is, a string as UTF-8, anything else as JSON. */
export type Payload = Uint8Array | string | unknown;

export function payloadBytes(value: Payload): Buffer {
  if (value instanceof Uint8Array) return Buffer.from(value);
  if (typeof value === "string") return Buffer.from(value, "utf8");
  return Buffer.from(JSON.stringify(value ?? null), "utf8");
}

/** Resolves after `ms`, or at once (rejecting with the signal's reason) when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Jittered exponential backoff: `initial` ms times `factor` per attempt, at most `max`, ±`jitter`. */
export class Backoff {
  constructor(
    readonly initial = 1000,
    readonly factor = 2,
    readonly max = 600_000,
    readonly jitter = 0.2,
  ) {}
  /** The delay (ms) before try `attempt` + 1 (attempt counts from 1). */
  delay(attempt: number): number {
    const base = Math.min(this.max, this.initial * this.factor ** Math.max(0, attempt - 1));
    return Math.max(0, base * (1 + (Math.random() * 2 - 1) * this.jitter));
  }
}

/** The backoff of retries through UNAVAILABLE and of re-opened streams. */
export const RETRY = new Backoff(100, 2, 5000, 0.2);
