/**
 * Typed errors: a non-OK gRPC status becomes one of these, carrying the code and the
 * server's message (which names the field for INVALID_ARGUMENT). `NotAcquired` and
 * `LeaseLost` are outcomes of this library's own calls, not statuses.
 */
import { status as Status } from "@grpc/grpc-js";

/** Any error this library raises; `code` is the gRPC status (undefined for the library's own outcomes). */
export class TurnstileError extends Error {
  readonly code: Status | undefined;
  constructor(message: string, code?: Status) {
    super(code === undefined ? message : `${Status[code]}: ${message}`);
    this.name = new.target.name;
    this.code = code;
    this.details = message;
  }
  /** The server's words alone (for INVALID_ARGUMENT they start with the field's name). */
  readonly details: string;
}

/** A TurnstileError class for one status code. */
function coded(code: Status) {
  return class extends TurnstileError {
    constructor(message: string) {
      super(message, code);
    }
  };
}

/** A field was refused; `details` starts with its name (`name: must be ...`). */
export class InvalidArgument extends coded(Status.INVALID_ARGUMENT) {}
/** No token, or one the server does not know. */
export class Unauthenticated extends coded(Status.UNAUTHENTICATED) {}
/** The token lacks the permission this call needs. */
export class PermissionDenied extends coded(Status.PERMISSION_DENIED) {}
export class NotFound extends coded(Status.NOT_FOUND) {}
/** For example a semaphore asked with another `limit` than its live holders use. */
export class FailedPrecondition extends coded(Status.FAILED_PRECONDITION) {}
/** A server limit (`--max-streams`, `--max-waiters`, the message size) was reached. */
export class ResourceExhausted extends coded(Status.RESOURCE_EXHAUSTED) {}
/** No replica answered within the call's retry budget. */
export class Unavailable extends coded(Status.UNAVAILABLE) {}
export class DeadlineExceeded extends coded(Status.DEADLINE_EXCEEDED) {}

/** `lock`, `semaphore` or `campaign` waited for `wait` and did not get it. */
export class NotAcquired extends TurnstileError {
  constructor(readonly lockName: string) {
    super(`${lockName}: not acquired`);
  }
}

/** A lease (lock, permit, leadership) ended while its holder still used it. */
export class LeaseLost extends TurnstileError {
  constructor(
    readonly lockName: string,
    readonly reason: string,
  ) {
    super(`${lockName}: lease lost: ${reason}`);
  }
}

/** A task `call` waited for ended without a result: DEAD (`state` "dead") or
 * cancelled (`state` "cancelled"), with its last error. */
export class TaskFailed extends TurnstileError {
  constructor(
    readonly taskId: string,
    readonly state: string,
    readonly lastError: string,
  ) {
    super(`task ${taskId} ended ${state}${lastError ? `: ${lastError}` : ""}`);
  }
}

const byCode: Partial<Record<Status, new (message: string) => TurnstileError>> = {
  [Status.INVALID_ARGUMENT]: InvalidArgument,
  [Status.UNAUTHENTICATED]: Unauthenticated,
  [Status.PERMISSION_DENIED]: PermissionDenied,
  [Status.NOT_FOUND]: NotFound,
  [Status.FAILED_PRECONDITION]: FailedPrecondition,
  [Status.RESOURCE_EXHAUSTED]: ResourceExhausted,
  [Status.UNAVAILABLE]: Unavailable,
  [Status.DEADLINE_EXCEEDED]: DeadlineExceeded,
};

/** The typed error for a failed call. */
export function fromGrpcError(err: unknown): TurnstileError {
  if (err instanceof TurnstileError) return err;
  const e = err as { code?: Status; details?: string; message?: string };
  const code = typeof e.code === "number" ? e.code : Status.UNKNOWN;
  const details = e.details ?? e.message ?? String(err);
  const cls = byCode[code];
  return cls ? new cls(details) : new TurnstileError(details, code);
}
