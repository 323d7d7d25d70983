"""One channel, its stubs, and unary calls retried through UNAVAILABLE with jittered
exponential backoff (100 ms doubling to 5 s) for at most the call's deadline."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional, TypeVar

import grpc
import grpc.aio

from ._connection import Settings
from .errors import from_rpc_error
from .v1 import lock_pb2_grpc, queue_pb2_grpc, schedule_pb2_grpc, semaphore_pb2_grpc

T = TypeVar("T")

DEFAULT_DEADLINE = 30.0
"""How long a unary call keeps retrying through UNAVAILABLE when the caller gave no
deadline of its own (seconds)."""

# Codes that mean "this replica could not be reached or is going away": the request
# was not applied, or applying it again is made harmless by the library's ids.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE})

# A stream that fails with one of these will not succeed by opening it again; any other
# failure of a long-lived stream (Hold, Subscribe) is a cut, and the stream re-opens.
FINAL = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)


@dataclass(frozen=True)
class Backoff:
    """Jittered exponential backoff: `initial` seconds, times `factor` per attempt, at
    most `max`, each delay moved by up to ±`jitter` of itself."""

    initial: float = 1.0
    factor: float = 2.0
    max: float = 600.0
    jitter: float = 0.2

    def delay(self, attempt: int) -> float:
        """The delay before try `attempt` + 1 (attempt counts from 1)."""
        base = min(self.max, self.initial * self.factor ** max(0, attempt - 1))
        return max(0.0, base * (1 + random.uniform(-self.jitter, self.jitter)))


RETRY = Backoff(initial=0.1, factor=2.0, max=5.0, jitter=0.2)
"""The backoff of retries through UNAVAILABLE and of re-opened streams."""


class Rpc:
    """The channel and the four services' stubs, with the caller's metadata."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.channel = settings.channel()
        self.metadata = settings.metadata
        self.locks = lock_pb2_grpc.LockServiceStub(self.channel)
        self.queues = queue_pb2_grpc.QueueServiceStub(self.channel)
        self.schedules = schedule_pb2_grpc.ScheduleServiceStub(self.channel)
        self.semaphores = semaphore_pb2_grpc.SemaphoreServiceStub(self.channel)

    async def call(
        self,
        method: Callable[..., Awaitable[T]],
        request: Any,
        deadline: Optional[float] = None,
    ) -> T:
        """`method(request)`, retried through UNAVAILABLE for at most `deadline` seconds
        (DEFAULT_DEADLINE when None); any other failure raises its typed error."""
        budget = DEFAULT_DEADLINE if deadline is None else deadline
        end = time.monotonic() + budget
        attempt = 0
        while True:
            attempt += 1
            left = end - time.monotonic()
            try:
                return await method(
                    request,
                    metadata=self.metadata,
                    timeout=max(0.001, left) if deadline is not None else None,
                )
            except grpc.aio.AioRpcError as err:
                pause = RETRY.delay(attempt)
                if err.code() in RETRYABLE and time.monotonic() + pause < end:
                    await asyncio.sleep(pause)
                    continue
                raise from_rpc_error(err) from None

    async def close(self) -> None:
        await self.channel.close(None)
