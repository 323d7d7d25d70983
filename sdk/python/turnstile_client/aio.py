"""`AsyncClient`: the whole library on asyncio (`grpc.aio`). The sync `Client` runs this
same code on a loop of its own, so every subtle part exists once."""

from __future__ import annotations

import asyncio
import os
import socket
import weakref
from concurrent.futures import Executor
from typing import AsyncGenerator, Optional

import grpc
import grpc.aio

from ._connection import Settings
from ._convert import DurationLike, instant, seconds
from ._lease import Lease, LockKind, SemaphoreKind, acquire
from ._queue import Queue
from ._rpc import RETRY, Backoff, Rpc
from ._schedules import Schedules
from ._worker import Handler, Worker, WorkerHooks
from .errors import NotAcquired, from_rpc_error
from .types import LockState
from .v1 import lock_pb2

DEFAULT_TTL = "15s"


def default_owner() -> str:
    """`<host>-<pid>`: who holds a lease when the caller names nobody."""
    return f"{socket.gethostname()}-{os.getpid()}"


class AsyncClient:
    """One channel to turnstile. `server`, `token` and `ca_cert` default to
    `TURNSTILE_SERVER` (else http://127.0.0.1:50051), `TURNSTILE_TOKEN` and
    `TURNSTILE_CA_CERT` (a PEM file)."""

    def __init__(
        self,
        server: Optional[str] = None,
        token: Optional[str] = None,
        ca_cert: Optional[str] = None,
    ) -> None:
        self._rpc = Rpc(Settings.resolve(server, token, ca_cert))
        self.schedules = Schedules(self._rpc)
        self._leases: "weakref.WeakSet[Lease]" = weakref.WeakSet()

    @property
    def raw(self) -> Rpc:
        """The generated stubs (`raw.locks`, `raw.queues`, `raw.schedules`,
        `raw.semaphores`) on this client's channel, and its `metadata` to pass."""
        return self._rpc

    async def close(self) -> None:
        """Releases every lease still held and closes the channel."""
        await asyncio.gather(
            *(lease.release() for lease in list(self._leases)), return_exceptions=True
        )
        await self._rpc.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # Locks and election.

    async def lock(
        self,
        name: str,
        ttl: DurationLike = DEFAULT_TTL,
        wait: Optional[DurationLike] = None,
        owner: Optional[str] = None,
    ) -> Lease:
        """Takes the lock, waiting up to `wait` (None: without end); raises
        `NotAcquired` when the wait runs out. Use as `async with await client.lock(...)`."""
        kind = LockKind(name, owner or default_owner(), seconds(ttl, "ttl"))
        got = await acquire(self._rpc, kind, None if wait is None else seconds(wait, "wait"))
        if got is None:
            raise NotAcquired(name)
        return self._keep(Lease(self._rpc, kind, *got))

    async def try_lock(
        self, name: str, ttl: DurationLike = DEFAULT_TTL, owner: Optional[str] = None
    ) -> Optional[Lease]:
        """One attempt: the lease, or None when the lock is held."""
        kind = LockKind(name, owner or default_owner(), seconds(ttl, "ttl"))
        got = await acquire(self._rpc, kind, 0.0)
        return None if got is None else self._keep(Lease(self._rpc, kind, *got))

    async def campaign(self, name: str, owner: str, ttl: DurationLike = DEFAULT_TTL) -> Lease:
        """Waits without end until this process leads (holds `name`); the lease's `lost`
        fires only after having led."""
        return await self.lock(name, ttl=ttl, wait=None, owner=owner)

    async def watch(self, name: str) -> AsyncGenerator[LockState, None]:
        """The lock's state now, then each change; re-opened after a cut, never going
        back to an older fencing token."""
        last: Optional[LockState] = None
        newest = 0
        attempt = 0
        while True:
            call = self._rpc.locks.Watch(
                lock_pb2.WatchRequest(name=name), metadata=self._rpc.metadata
            )
            try:
                async for message in call:
                    attempt = 0
                    event = message.WhichOneof("event")
                    if event == "held":
                        held = message.held
                        if held.fencing_token < newest:
                            continue
                        newest = held.fencing_token
                        state = LockState(
                            True, held.owner, held.fencing_token, instant(held.expires_at)
                        )
                    elif event == "free":
                        if message.free.fencing_token < newest:
                            continue
                        state = LockState(False, "", message.free.fencing_token, None)
                    else:
                        continue
                    if state != last:
                        last = state
                        yield state
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise from_rpc_error(err) from None
            finally:
                call.cancel()
            attempt += 1
            await asyncio.sleep(RETRY.delay(attempt))

    async def check_fence(self, name: str, fencing_token: int) -> bool:
        """Whether `name` is held now under exactly this fencing token."""
        reply = await self._rpc.call(
            self._rpc.locks.CheckFence,
            lock_pb2.CheckFenceRequest(name=name, fencing_token=fencing_token),
        )
        return bool(reply.current)

    # Semaphores.

    async def semaphore(
        self,
        name: str,
        limit: int,
        permits: int = 1,
        ttl: DurationLike = DEFAULT_TTL,
        wait: Optional[DurationLike] = None,
        owner: Optional[str] = None,
    ) -> Lease:
        """Takes `permits` of the semaphore (first come, first served), waiting up to
        `wait` (None: without end); raises `NotAcquired` when it runs out."""
        kind = SemaphoreKind(name, owner or default_owner(), seconds(ttl, "ttl"), limit, permits)
        got = await acquire(self._rpc, kind, None if wait is None else seconds(wait, "wait"))
        if got is None:
            raise NotAcquired(name)
        return self._keep(Lease(self._rpc, kind, *got))

    # Queues and workers.

    def queue(self, name: str) -> Queue:
        return Queue(self._rpc, name)

    def worker(
        self,
        queue: str,
        handler: Handler,
        concurrency: int = 1,
        visibility: DurationLike = "30s",
        worker_id: Optional[str] = None,
        backoff: Backoff = Backoff(),
        drain_timeout: DurationLike = "30s",
        hooks: Optional[WorkerHooks] = None,
        executor: Optional[Executor] = None,
    ) -> Worker:
        """A worker running `handler` (async, or plain functions on `executor`'s threads)
        on the queue's tasks; `await worker.run()`."""
        return Worker(
            self._rpc,
            queue,
            handler,
            concurrency=concurrency,
            visibility=visibility,
            worker_id=worker_id,
            backoff=backoff,
            drain_timeout=drain_timeout,
            hooks=hooks,
            executor=executor,
        )

    def _keep(self, lease: Lease) -> Lease:
        self._leases.add(lease)
        return lease


__all__ = ["AsyncClient", "Lease", "Queue", "Worker", "WorkerHooks", "Schedules"]
