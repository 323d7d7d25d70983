"""turnstile's client library: locks, semaphores, leader election, queues, workers and
schedules, correct by default. `Client` blocks; `AsyncClient` (also in
`turnstile_client.aio`) is the same on asyncio. The raw generated stubs are in
`turnstile_client.v1`."""

from ._convert import DurationLike, Payload
from ._rpc import Backoff
from ._worker import WorkerHooks
from .aio import AsyncClient
from .client import Client, Lease, Queue, Schedules, Worker
from .errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    LeaseLost,
    NotAcquired,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    TaskFailed,
    TurnstileError,
    Unauthenticated,
    Unavailable,
)
from .types import (
    Attempt,
    Enqueued,
    Fail,
    LockState,
    QueueConfig,
    RateLimit,
    Retention,
    Retry,
    Schedule,
    Stats,
    Task,
    TaskSpec,
)

__all__ = [
    "Attempt",
    "AsyncClient",
    "Backoff",
    "Client",
    "DeadlineExceeded",
    "DurationLike",
    "Enqueued",
    "FailedPrecondition",
    "InvalidArgument",
    "Lease",
    "LeaseLost",
    "LockState",
    "NotAcquired",
    "NotFound",
    "Payload",
    "PermissionDenied",
    "Queue",
    "QueueConfig",
    "RateLimit",
    "ResourceExhausted",
    "Retention",
    "Retry",
    "Fail",
    "Schedule",
    "Schedules",
    "Stats",
    "Task",
    "TaskFailed",
    "TaskSpec",
    "TurnstileError",
    "Unauthenticated",
    "Unavailable",
    "Worker",
    "WorkerHooks",
]
