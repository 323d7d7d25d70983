"""`Client`: the blocking twin of `AsyncClient`. It runs the asyncio library on an
event loop of its own (one thread, stopped by `close()`), so the protocol's subtle parts
(re-attach, loss, drain) exist once; plain handlers run on a thread pool."""

from __future__ import annotations

import asyncio
import signal
import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import datetime
from typing import Any, Awaitable, Callable, Iterator, List, Optional, Sequence, TypeVar

from . import _lease, _queue, _schedules, _worker
from ._convert import DurationLike, Payload
from ._rpc import Backoff, Rpc
from .aio import DEFAULT_TTL, AsyncClient
from .errors import LeaseLost
from .types import (
    Enqueued,
    LockState,
    QueueConfig,
    RateLimit,
    Retention,
    Schedule,
    Stats,
    Task,
    TaskSpec,
)

T = TypeVar("T")


class _Loop:
    """An event loop on a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="turnstile-client", daemon=True
        )
        self._thread.start()

    def run(self, coro: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(_wrap(coro), self.loop).result()

    def call(self, fn: Callable[[], None]) -> None:
        self.loop.call_soon_threadsafe(fn)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def _wrap(coro: Awaitable[T]) -> T:
    return await coro


class Lease:
    """A held lock, permit or leadership. `lost` is a `threading.Event` set when the
    lease is gone while held (never for a re-attach that kept it)."""

    def __init__(self, loop: _Loop, lease: _lease.Lease) -> None:
        self._loop = loop
        self._lease = lease
        self.name = lease.name
        self.owner = lease.owner
        self.token = lease.token
        self.fencing_token = lease.fencing_token
        self.lost = threading.Event()
        loop.call(lambda: lease.on_lost(lambda _reason: self.lost.set()))

    @property
    def expires_at(self) -> Optional[datetime]:
        return self._lease.expires_at

    @property
    def lost_reason(self) -> Optional[str]:
        return self._lease.lost_reason

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Calls `callback(reason)` (on the client's thread) when the lease is lost."""
        self._loop.call(lambda: self._lease.on_lost(callback))

    def check(self) -> None:
        """Raises `LeaseLost` if the lease is gone."""
        if self._lease.lost_reason is not None:
            raise LeaseLost(self.name, self._lease.lost_reason)

    def release(self) -> bool:
        return self._loop.run(self._lease.release())

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Queue:
    """One queue; the calls of `turnstile_client.aio.Queue`, blocking."""

    def __init__(self, loop: _Loop, queue: _queue.Queue) -> None:
        self._loop = loop
        self._queue = queue
        self.name = queue.name

    def enqueue(
        self,
        payload: Payload = b"",
        id: Optional[str] = None,
        delay: Optional[DurationLike] = None,
        at: Optional[datetime] = None,
        group: Optional[str] = None,
        priority: int = 0,
        max_attempts: int = 0,
        dedupe_window: Optional[DurationLike] = None,
        on_duplicate: str = "keep",
    ) -> Enqueued:
        return self._loop.run(
            self._queue.enqueue(
                payload, id, delay, at, group, priority, max_attempts, dedupe_window, on_duplicate
            )
        )

    def enqueue_many(self, specs: Sequence[TaskSpec]) -> List[Enqueued]:
        return self._loop.run(self._queue.enqueue_many(specs))

    def stats(self) -> Stats:
        return self._loop.run(self._queue.stats())

    def peek(self, state: str = "ready", limit: int = 10) -> List[Task]:
        return self._loop.run(self._queue.peek(state, limit))

    def cancel(self, ids: Sequence[str], running: bool = False) -> List[str]:
        return self._loop.run(self._queue.cancel(ids, running))

    def get(self, id: str) -> Task:
        """The task with its delivery history, last error, progress and result."""
        return self._loop.run(self._queue.get(id))

    def wait(self, id: str, timeout: DurationLike) -> Optional[Task]:
        """The task once done (completed, dead, cancelled), or None after `timeout`."""
        return self._loop.run(self._queue.wait(id, timeout))

    def call(self, payload: Payload = b"", timeout: DurationLike = "30s", **options: Any) -> bytes:
        """Enqueues one task and returns a worker's result (see `AsyncClient`'s)."""
        return self._loop.run(self._queue.call(payload, timeout, **options))

    def redrive(self, ids: Optional[Sequence[str]] = None) -> int:
        return self._loop.run(self._queue.redrive(ids))

    def pause(self, group: Optional[str] = None) -> None:
        self._loop.run(self._queue.pause(group))

    def resume(self, group: Optional[str] = None) -> None:
        self._loop.run(self._queue.resume(group))

    def configure(
        self,
        paused: Optional[bool] = None,
        max_in_flight: Optional[int] = None,
        group_max_in_flight: Optional[int] = None,
        rate_limit: Optional[RateLimit] = None,
        group_rate_limit: Optional[RateLimit] = None,
        keep_completed: Optional[Retention] = None,
        keep_dead: Optional[Retention] = None,
    ) -> QueueConfig:
        return self._loop.run(
            self._queue.configure(
                paused,
                max_in_flight,
                group_max_in_flight,
                rate_limit,
                group_rate_limit,
                keep_completed,
                keep_dead,
            )
        )


class Schedules:
    """The tenant's schedules; the calls of `turnstile_client.aio.Schedules`, blocking."""

    def __init__(self, loop: _Loop, schedules: _schedules.Schedules) -> None:
        self._loop = loop
        self._schedules = schedules

    def put(self, name: str, queue: str, **options: Any) -> Schedule:
        """See `aio.Schedules.put`: cron or every, time_zone, payload, overlap, catch_up,
        paused, max_attempts, priority, group."""
        return self._loop.run(self._schedules.put(name, queue, **options))

    def get(self, name: str) -> Optional[Schedule]:
        return self._loop.run(self._schedules.get(name))

    def list(self, prefix: str = "") -> List[Schedule]:
        return self._loop.run(self._schedules.list(prefix))

    def delete(self, name: str) -> bool:
        return self._loop.run(self._schedules.delete(name))

    def pause(self, name: str) -> Schedule:
        return self._loop.run(self._schedules.pause(name))

    def resume(self, name: str) -> Schedule:
        return self._loop.run(self._schedules.resume(name))

    def trigger(self, name: str) -> str:
        return self._loop.run(self._schedules.trigger(name))


class Worker:
    """Runs a plain function on the queue's tasks, up to `concurrency` at once on
    threads. `run()` blocks until `stop()` or, in the main thread, SIGTERM/SIGINT; then
    it drains and returns."""

    def __init__(self, loop: _Loop, worker: _worker.Worker, pool: Optional[ThreadPoolExecutor]):
        self._loop = loop
        self._worker = worker
        self._pool = pool
        self.worker_id = worker.worker_id

    def run(self) -> None:
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: self.stop())
        try:
            self._loop.run(self._worker.run(handle_signals=False))
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self._pool is not None:
                self._pool.shutdown(wait=False)

    def stop(self) -> None:
        """Asks `run()` to drain and return; safe from any thread and from a signal."""
        self._worker.stop()


class Client:
    """One channel to turnstile, blocking calls. `server`, `token` and `ca_cert` default
    to `TURNSTILE_SERVER` (else http://127.0.0.1:50051), `TURNSTILE_TOKEN` and
    `TURNSTILE_CA_CERT`. Close it (or use `with`): that releases held leases and stops
    its thread."""

    def __init__(
        self,
        server: Optional[str] = None,
        token: Optional[str] = None,
        ca_cert: Optional[str] = None,
    ) -> None:
        self._loop = _Loop()

        async def make() -> AsyncClient:
            return AsyncClient(server, token, ca_cert)

        try:
            self._async = self._loop.run(make())
        except BaseException:
            self._loop.stop()
            raise
        self.schedules = Schedules(self._loop, self._async.schedules)
        self._closed = False

    @property
    def raw(self) -> Rpc:
        """The generated asyncio stubs on this client's channel (run them on your own
        loop with a channel of your own; see `turnstile_client.v1` for the messages)."""
        return self._async.raw

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.run(self._async.close())
        self._loop.stop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lock(
        self,
        name: str,
        ttl: DurationLike = DEFAULT_TTL,
        wait: Optional[DurationLike] = None,
        owner: Optional[str] = None,
    ) -> Lease:
        """Takes the lock, waiting up to `wait` (None: without end); raises
        `NotAcquired` when the wait runs out. Use as `with client.lock(...) as lease:`."""
        return Lease(self._loop, self._loop.run(self._async.lock(name, ttl, wait, owner)))

    def try_lock(
        self, name: str, ttl: DurationLike = DEFAULT_TTL, owner: Optional[str] = None
    ) -> Optional[Lease]:
        lease = self._loop.run(self._async.try_lock(name, ttl, owner))
        return None if lease is None else Lease(self._loop, lease)

    def campaign(self, name: str, owner: str, ttl: DurationLike = DEFAULT_TTL) -> Lease:
        """Blocks until this process leads; `lost` fires only after having led."""
        return Lease(self._loop, self._loop.run(self._async.campaign(name, owner, ttl)))

    def watch(self, name: str) -> Iterator[LockState]:
        """The lock's state now, then each change (re-opened after a cut)."""
        states = self._async.watch(name)
        try:
            while True:
                yield self._loop.run(states.__anext__())
        finally:
            if not self._closed:
                self._loop.run(states.aclose())

    def check_fence(self, name: str, fencing_token: int) -> bool:
        return self._loop.run(self._async.check_fence(name, fencing_token))

    def semaphore(
        self,
        name: str,
        limit: int,
        permits: int = 1,
        ttl: DurationLike = DEFAULT_TTL,
        wait: Optional[DurationLike] = None,
        owner: Optional[str] = None,
    ) -> Lease:
        return Lease(
            self._loop,
            self._loop.run(self._async.semaphore(name, limit, permits, ttl, wait, owner)),
        )

    def queue(self, name: str) -> Queue:
        return Queue(self._loop, self._async.queue(name))

    def worker(
        self,
        queue: str,
        handler: Callable[[Task], Any],
        concurrency: int = 1,
        visibility: DurationLike = "30s",
        worker_id: Optional[str] = None,
        backoff: Backoff = Backoff(),
        drain_timeout: DurationLike = "30s",
        hooks: Optional[_worker.WorkerHooks] = None,
        executor: Optional[Executor] = None,
    ) -> Worker:
        """A worker running `handler(task)` on up to `concurrency` threads (or on
        `executor`); return to ack, raise `Retry(delay)` to retry later, raise anything
        else to retry with `backoff`."""
        pool = None
        if executor is None:
            pool = ThreadPoolExecutor(concurrency, thread_name_prefix="turnstile-handler")
            executor = pool
        inner = self._async.worker(
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
        return Worker(self._loop, inner, pool)
