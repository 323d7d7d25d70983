"""Typed errors: a non-OK gRPC status becomes one of these, carrying the code and the
server's message (which names the field for INVALID_ARGUMENT). `NotAcquired` and
`LeaseLost` are outcomes of this library's own calls, not statuses."""

from __future__ import annotations

from typing import Optional

import grpc


class TurnstileError(Exception):
    """Any error this library raises. `code` is the gRPC status (None for the library's
    own outcomes) and `message` the server's words."""

    code: Optional[grpc.StatusCode] = None

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        if self.code is None:
            return self.message
        return f"{self.code.name}: {self.message}"


class InvalidArgument(TurnstileError, ValueError):
    """A field was refused, by the server or already by the library; the message starts
    with its name (`name: must be ...`)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class Unauthenticated(TurnstileError):
    """No token, or one the server does not know."""

    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(TurnstileError):
    """The token lacks the permission this call needs."""

    code = grpc.StatusCode.PERMISSION_DENIED


class NotFound(TurnstileError):
    code = grpc.StatusCode.NOT_FOUND


class FailedPrecondition(TurnstileError):
    """For example a semaphore asked with another `limit` than its live holders use."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(TurnstileError):
    """A server limit (`--max-streams`, `--max-waiters`, the message size) was reached."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(TurnstileError):
    """No replica answered within the call's retry budget."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(TurnstileError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotAcquired(TurnstileError):
    """`lock`, `semaphore` or `campaign` waited for `wait` and did not get it."""

    def __init__(self, name: str, holder: str = "") -> None:
        super().__init__(f"{name}: not acquired" + (f" (held by {holder})" if holder else ""))
        self.name = name
        self.holder = holder


class LeaseLost(TurnstileError):
    """A lease (lock, permit, leadership) ended while its holder still used it."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: lease lost: {reason}")
        self.name = name
        self.reason = reason


class TaskFailed(TurnstileError):
    """A task `call` waited for ended without a result: DEAD (`state` "dead") or
    cancelled (`state` "cancelled"), with its last error."""

    def __init__(self, id: str, state: str, last_error: str) -> None:
        super().__init__(f"task {id} ended {state}" + (f": {last_error}" if last_error else ""))
        self.id = id
        self.state = state
        self.last_error = last_error


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        FailedPrecondition,
        ResourceExhausted,
        Unavailable,
        DeadlineExceeded,
    )
}


def from_rpc_error(err: grpc.RpcError) -> TurnstileError:
    """The typed error for a failed call (grpc's sync and asyncio errors alike)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    cls = _BY_CODE.get(code)
    if cls is None:
        return TurnstileError(details or "", code)
    return cls(details or "")
