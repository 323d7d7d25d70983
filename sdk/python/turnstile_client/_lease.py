"""Leases held through a `Hold` stream (locks, semaphore permits, leadership): acquired
once, renewed by the server while the stream is open, re-attached by token after a cut
(any replica), released on exit, and `lost` signalled only when the lease is really gone.

The subtle part lives here once: a cut stream is not a lost lease. The lease runs on in
Redis until its TTL, so the keeper re-opens `Hold` with the lease's token until a
replica answers (same token, same fencing token: nothing fires) or the lease's end
passes (then `lost` fires)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, List, Optional, Protocol

import grpc
import grpc.aio
from google.protobuf.timestamp_pb2 import Timestamp

from ._convert import instant
from ._rpc import FINAL, RETRY, Rpc
from .errors import LeaseLost, TurnstileError, from_rpc_error
from .v1 import lock_pb2, semaphore_pb2

log = logging.getLogger("turnstile_client")

MAX_WAIT = 3600.0
"""The longest wait one Hold takes (the server's bound); longer waits re-ask."""



class HoldKind(Protocol):
    """What is held: opens its Hold stream and releases by token."""

    name: str
    owner: str
    ttl: float

    def hold(self, rpc: Rpc, token: str, wait: float) -> Any: ...

    async def release(self, rpc: Rpc, token: str) -> bool: ...


@dataclass
class LockKind:
    name: str
    owner: str
    ttl: float

    def hold(self, rpc: Rpc, token: str, wait: float) -> Any:
        request = lock_pb2.HoldRequest(name=self.name, owner=self.owner, token=token)
        request.ttl.FromMilliseconds(max(1, int(self.ttl * 1000)))
        request.wait.FromMilliseconds(int(wait * 1000))
        return rpc.locks.Hold(request, metadata=rpc.metadata)

    async def release(self, rpc: Rpc, token: str) -> bool:
        reply = await rpc.call(
            rpc.locks.Release, lock_pb2.ReleaseRequest(name=self.name, token=token)
        )
        return bool(reply.released)


@dataclass
class SemaphoreKind:
    name: str
    owner: str
    ttl: float
    limit: int
    permits: int

    def hold(self, rpc: Rpc, token: str, wait: float) -> Any:
        request = semaphore_pb2.SemaphoreServiceHoldRequest(
            name=self.name, owner=self.owner, limit=self.limit, permits=self.permits, token=token
        )
        request.ttl.FromMilliseconds(max(1, int(self.ttl * 1000)))
        request.wait.FromMilliseconds(int(wait * 1000))
        return rpc.semaphores.Hold(request, metadata=rpc.metadata)

    async def release(self, rpc: Rpc, token: str) -> bool:
        reply = await rpc.call(
            rpc.semaphores.Release,
            semaphore_pb2.SemaphoreServiceReleaseRequest(name=self.name, token=token),
        )
        return bool(reply.released)


async def _first_event(call: Any) -> Any:
    """The stream's first `acquired` or `lost` event (heartbeats skipped); None when the
    stream ended without either."""
    async for message in call:
        if message.WhichOneof("event") in ("acquired", "lost"):
            return message
    return None


class Lease:
    """A held lease. `lost` is set (and `on_lost` callbacks run) when the lease is gone
    while held: expired while no replica could be reached, taken over after expiry, or
    released by `ReleaseAll`. Never for a re-attach that kept the lease."""

    def __init__(self, rpc: Rpc, kind: HoldKind, call: Any, acquired: Any) -> None:
        self._rpc = rpc
        self._kind = kind
        self.name: str = kind.name
        self.owner: str = kind.owner
        self.token: str = acquired.token
        self.fencing_token: int = int(acquired.fencing_token)
        self.expires_at: Optional[datetime] = None
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self._callbacks: List[Callable[[str], None]] = []
        self._released = False
        self._ends = 0.0
        self._call = call
        self._renewed(acquired.expires_at)
        self._keeper = asyncio.get_running_loop().create_task(self._keep())

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Calls `callback(reason)` when the lease is lost (at once if it already is)."""
        if self.lost_reason is not None:
            callback(self.lost_reason)
        else:
            self._callbacks.append(callback)

    def check(self) -> None:
        """Raises `LeaseLost` if the lease is gone."""
        if self.lost_reason is not None:
            raise LeaseLost(self.name, self.lost_reason)

    @property
    def released(self) -> bool:
        return self._released

    async def release(self) -> bool:
        """Frees the lease (only this holder's); True when this call freed it."""
        if self._released:
            return False
        self._released = True
        freed = False
        # Release first, then close the stream: closing it frees the lease too, and a
        # close that won the race would make the Release answer false.
        if self.lost_reason is None:
            try:
                freed = await self._kind.release(self._rpc, self.token)
            except TurnstileError as err:
                # Closing the stream below frees it too once the server sees the close.
                log.warning("release of %s failed: %s", self.name, err)
        self._keeper.cancel()
        self._call.cancel()
        return freed

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    def _renewed(self, expires_at: Timestamp) -> None:
        when = instant(expires_at)
        self.expires_at = when
        ends = time.monotonic() + self._kind.ttl
        if when is not None:
            ends = min(ends, time.monotonic() + (when.timestamp() - time.time()))
        self._ends = ends

    def _lose(self, reason: str) -> None:
        if self._released or self.lost_reason is not None:
            return
        self.lost_reason = reason
        self.lost.set()
        log.warning("lease of %s lost: %s", self.name, reason)
        for callback in self._callbacks:
            try:
                callback(reason)
            except Exception:  # a user's callback must not stop the others
                log.exception("an on_lost callback of %s failed", self.name)
        self._callbacks.clear()

    async def _keep(self) -> None:
        call = self._call
        while call is not None:
            try:
                async for message in call:
                    event = message.WhichOneof("event")
                    if event == "renewed":
                        self._renewed(message.renewed.expires_at)
                    elif event == "acquired":
                        self._renewed(message.acquired.expires_at)
                    elif event == "lost":
                        self._lose(message.lost.reason)
                        return
            except grpc.aio.AioRpcError as err:
                if self._released:
                    return
                if err.code() in FINAL:
                    self._lose(str(from_rpc_error(err)))
                    return
                log.info("hold stream of %s cut (%s); re-attaching", self.name, err.code().name)
            if self._released:
                return
            call = await self._reattach()

    async def _reattach(self) -> Any:
        """A new stream holding the same lease, or None (lost) once its end passed."""
        attempt = 0
        while not self._released:
            left = self._ends - time.monotonic()
            if left <= 0:
                self._lose("the lease ran out while no replica answered")
                return None
            attempt += 1
            call = self._kind.hold(self._rpc, self.token, 0)
            self._call = call
            try:
                first = await _first_event(call)
            except grpc.aio.AioRpcError as err:
                if err.code() in FINAL:
                    self._lose(str(from_rpc_error(err)))
                    return None
                await asyncio.sleep(min(RETRY.delay(attempt), max(0.0, left)))
                continue
            if first is None:
                await asyncio.sleep(min(RETRY.delay(attempt), max(0.0, left)))
                continue
            if first.WhichOneof("event") == "lost":
                self._lose(first.lost.reason)
                return None
            self._renewed(first.acquired.expires_at)
            log.info("hold of %s re-attached (fencing token %d)", self.name, self.fencing_token)
            return call
        return None


async def acquire(rpc: Rpc, kind: HoldKind, wait: Optional[float]) -> Optional[Any]:
    """Opens Hold streams until one acquires (returns the stream and its `acquired`
    event), `wait` runs out (None; `wait` None waits without end), or a final error."""
    end = None if wait is None else time.monotonic() + wait
    attempt = 0
    while True:
        left = MAX_WAIT if end is None else max(0.0, end - time.monotonic())
        call = kind.hold(rpc, "", min(left, MAX_WAIT))
        try:
            first = await _first_event(call)
        except grpc.aio.AioRpcError as err:
            if err.code() in FINAL or (end is not None and time.monotonic() >= end):
                raise from_rpc_error(err) from None
            attempt += 1
            await asyncio.sleep(RETRY.delay(attempt))
            continue
        if first is not None and first.WhichOneof("event") == "acquired":
            return call, first.acquired
        call.cancel()
        if end is not None and time.monotonic() >= end:
            return None
        if first is None or wait is None or first.lost.reason != "not acquired":
            # The stream ended early (a replica going away) or lost for another reason
            # than the wait running out: ask again after a pause.
            attempt += 1
            pause = RETRY.delay(attempt)
            if end is not None:
                pause = min(pause, max(0.0, end - time.monotonic()))
            await asyncio.sleep(pause)
