"""The worker: one `Subscribe` stream, up to `concurrency` handlers at once, acks
coalesced, leases extended for long handlers, the stream re-attached by `worker_id`
after a cut, and a drain that finishes what runs and acks nothing unfinished.

Why the drain holds acks and nacks until the stream is closed: each one frees a slot,
and the server would fill it with a new delivery that the draining worker must then
give back (an attempt spent for nothing). Receipts stay valid after the stream closes
(the worker's deliveries stay leased to its `worker_id` for the server's
`--reattach-grace`), so the held acks and nacks are sent right after the close, and the
deliveries never started go back at once with a Nack instead of waiting out the grace."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import secrets
import signal
import socket
import threading
import traceback
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import grpc
import grpc.aio

from ._convert import DurationLike, payload_bytes, seconds
from ._rpc import FINAL, RETRY, Backoff, Rpc
from .errors import TurnstileError, from_rpc_error
from .types import Fail, Retry, Task
from .v1 import queue_pb2

log = logging.getLogger("turnstile_client")

ACK_BATCH = 64
"""The most receipts one Ack carries."""

MAX_RESULT_BYTES = 64 * 1024
"""The most bytes a handler's result may hold (the server refuses more)."""


def result_bytes(value: Any) -> Optional[bytes]:
    """A handler's return value as its task's result: None is none, bytes as they are,
    a str as UTF-8, anything else as JSON."""
    if value is None:
        return None
    return payload_bytes(value)


Handler = Callable[[Task], Any]


def default_worker_id() -> str:
    """`<host>-<pid>-<random>`: stable for the worker's life, unique across processes."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass
class WorkerHooks:
    """Callbacks for the user's metrics and logs; each gets the task (and the error)."""

    on_start: Optional[Callable[[Task], None]] = None
    on_success: Optional[Callable[[Task], None]] = None
    on_failure: Optional[Callable[[Task, BaseException], None]] = None
    on_retry: Optional[Callable[[Task, float], None]] = None
    on_dead: Optional[Callable[[Task, BaseException], None]] = None


class _Acks:
    """Receipts to ack, sent as soon as no Ack is in flight (at most ACK_BATCH each), so
    a calm worker acks at once and a busy one coalesces."""

    def __init__(self, rpc: Rpc, queue: str) -> None:
        self._rpc = rpc
        self._queue = queue
        self.pending: List[str] = []
        self.results: Dict[str, bytes] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.held = False

    def add(self, receipt: str, result: Optional[bytes] = None) -> None:
        self.pending.append(receipt)
        if result is not None:
            self.results[receipt] = result
        self._idle.clear()
        if not self.held:
            self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.pending and not self.held:
                batch = self.pending[:ACK_BATCH]
                await self._send(batch)
                # Receipts added while the Ack was in flight stay for the next one.
                del self.pending[: len(batch)]
            if not self.pending:
                self._idle.set()

    async def _send(self, receipts: List[str]) -> None:
        results = {r: self.results.pop(r) for r in receipts if r in self.results}
        try:
            reply = await self._rpc.call(
                self._rpc.queues.Ack,
                queue_pb2.AckRequest(queue=self._queue, receipts=receipts, results=results),
            )
        except TurnstileError as err:
            # Unacked deliveries come back when their leases end: at least once, not lost.
            log.warning("ack of %d deliveries failed: %s", len(receipts), err)
            return
        stale = sum(1 for acked in reply.acked if not acked)
        if stale:
            log.warning("%d acks were stale (their leases had ended)", stale)

    async def flush(self) -> None:
        """Sends everything pending (also what was held) and waits until it is sent."""
        self.held = False
        if self.pending:
            self._wake.set()
            await self._idle.wait()


def _error_text(err: BaseException) -> str:
    """What a Nack says of a failure: the exception and its stack trace (the server
    keeps the first 4 KiB)."""
    if isinstance(err, (Retry, Fail)):
        return str(err)
    return "".join(traceback.format_exception(type(err), err, err.__traceback__)).strip()


class _Run:
    def __init__(self, task: Task) -> None:
        self.task = task
        self.future: Optional[asyncio.Task[None]] = None
        self.lost = False
        # The server cancelled the task while it ran (`cancel(ids, running=True)`).
        self.stopped = False


class Worker:
    """Runs `handler` on the queue's tasks; `run()` until `stop()` (or SIGTERM/SIGINT
    in a process's main thread), then drains."""

    def __init__(
        self,
        rpc: Rpc,
        queue: str,
        handler: Handler,
        concurrency: int = 1,
        visibility: DurationLike = "30s",
        worker_id: Optional[str] = None,
        backoff: Backoff = Backoff(),
        drain_timeout: DurationLike = "30s",
        hooks: Optional[WorkerHooks] = None,
        executor: Optional[Executor] = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency: must be at least 1")
        self._rpc = rpc
        self.queue = queue
        self._handler = handler
        self._is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)
        )
        self.concurrency = concurrency
        self.visibility = seconds(visibility, "visibility")
        self.worker_id = worker_id or default_worker_id()
        self.backoff = backoff
        self.drain_timeout = seconds(drain_timeout, "drain_timeout")
        self.hooks = hooks or WorkerHooks()
        self._executor = executor
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop: Optional[asyncio.Event] = None
        self._stop_requested = False
        self._running: Dict[str, _Run] = {}
        self._draining = False
        self._unstarted: List[str] = []
        self._held_nacks: List[Tuple[str, float, str, bool]] = []
        self._cut: Set[str] = set()
        self._ending: Set["asyncio.Task[bool]"] = set()

    def stop(self) -> None:
        """Asks `run()` to drain and return; safe from any thread and from a signal."""
        self._stop_requested = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop already closed: run() has returned
                pass

    async def run(self, handle_signals: bool = True) -> None:
        """Works the queue until `stop()`, then drains: takes nothing new, lets running
        handlers finish within `drain_timeout`, sends their acks, closes the stream and
        gives back what did not finish. Raises the typed error of a stream the server
        refused (a bad queue name, a wrong token)."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        installed = []
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self.stop)
                installed.append(sig)
        acks = _Acks(self._rpc, self.queue)
        self._acks = acks
        flusher = asyncio.create_task(acks.run())
        stream = asyncio.create_task(self._consume())
        stopped = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({stream, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if stream.done():
                stream.result()  # a final error; a clean end only comes with a drain
            await self._drain(stream)
        finally:
            for task in (stream, stopped):
                task.cancel()
            for run in list(self._running.values()):
                if run.future is not None:
                    run.future.cancel()
            flusher.cancel()
            for sig in installed:
                self._loop.remove_signal_handler(sig)

    async def _consume(self) -> None:
        attempt = 0
        while not self._draining:
            request = queue_pb2.SubscribeRequest(
                queue=self.queue, max_in_flight=self.concurrency, worker_id=self.worker_id
            )
            request.visibility.FromMilliseconds(int(self.visibility * 1000))
            call = self._rpc.queues.Subscribe(request, metadata=self._rpc.metadata)
            try:
                async for message in call:
                    attempt = 0
                    event = message.WhichOneof("event")
                    if event == "task":
                        self._deliver(message.task)
                    elif event == "cancelled":
                        self._stop_task(message.cancelled.receipt)
            except grpc.aio.AioRpcError as err:
                if err.code() in FINAL:
                    raise from_rpc_error(err) from None
                log.info("subscribe stream of %s cut (%s); re-attaching", self.queue, err.code().name)
            finally:
                call.cancel()
            if self._draining:
                return
            attempt += 1
            await asyncio.sleep(RETRY.delay(attempt))
        # Draining: keep the stream open (cancelled by the drain) so nothing goes back early.
        await asyncio.Event().wait()

    def _deliver(self, wire: Any) -> None:
        receipt = wire.receipt
        if receipt in self._running or receipt in self._acks.pending or receipt in self._cut:
            return  # a re-attached stream sends its kept deliveries again
        if self._draining:
            self._unstarted.append(receipt)
            return
        run = _Run(Task.from_pb(wire, self.queue))
        self._running[receipt] = run
        run.future = asyncio.create_task(self._handle(run))

    def _stop_task(self, receipt: str) -> None:
        """The server cancelled a task this worker runs: its handler's cancellation
        fires (an async handler is cancelled; a plain one sees `task.cancelled` set), and
        its delivery is ended at once (it ends as cancelled on the server); what the
        handler does after is not reported."""
        run = self._running.get(receipt)
        if run is None or run.stopped or run.lost:
            return
        run.stopped = True
        run.lost = True
        run.task.cancelled.set()
        if self._is_async and run.future is not None:
            run.future.cancel()
        self._end_stopped(run)

    def _end_stopped(self, run: _Run) -> None:
        """Ends a cancelled delivery now instead of at its lease's end (a Nack, which
        the server turns into the task's end as cancelled)."""
        if run.task.receipt in self._cut:
            return
        if self._draining:
            self._held_nacks.append((run.task.receipt, 0.0, "cancelled while it ran", False))
            return
        ending = asyncio.create_task(
            self._send_nack(run.task.receipt, 0.0, "cancelled while it ran")
        )
        self._ending.add(ending)
        ending.add_done_callback(self._ending.discard)

    async def _invoke(self, task: Task) -> Any:
        if self._is_async:
            return await self._handler(task)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._handler, task)

    async def _handle(self, run: _Run) -> None:
        task = run.task
        extender = asyncio.create_task(self._extend(run))
        self._hook(self.hooks.on_start, task)
        try:
            try:
                value = await self._invoke(task)
                result = result_bytes(value)
                if result is not None and len(result) > MAX_RESULT_BYTES:
                    raise Fail(
                        f"its result is {len(result)} bytes, over the limit of {MAX_RESULT_BYTES}"
                    )
            except asyncio.CancelledError:
                # Cut by the drain (given back there), by a lost lease, or cancelled by
                # the server (ended in _stop_task).
                return
            except Retry as retry:
                delay = seconds(retry.delay, "delay")
                self._hook(self.hooks.on_retry, task, delay)
                await self._nack(run, delay, retry)
            except Fail as fail:
                log.warning("handler gave up on task %s (attempt %d): %s", task.id, task.attempt, fail)
                await self._nack(run, 0.0, fail, give_up=True)
            except Exception as err:
                log.warning("handler failed on task %s (attempt %d): %s", task.id, task.attempt, err)
                await self._nack(run, self.backoff.delay(task.attempt), err)
            else:
                if run.lost or task.receipt in self._cut:
                    # Its lease is gone, the server cancelled it, or the drain gave it
                    # back: not ours to ack.
                    return
                self._acks.add(task.receipt, result)
                self._hook(self.hooks.on_success, task)
        finally:
            extender.cancel()
            self._running.pop(task.receipt, None)

    async def _nack(
        self, run: _Run, delay: float, err: BaseException, give_up: bool = False
    ) -> None:
        task = run.task
        self._hook(self.hooks.on_failure, task, err)
        if run.lost or task.receipt in self._cut:
            return
        error = _error_text(err)
        if self._draining:
            self._held_nacks.append((task.receipt, delay, error, give_up))
            return
        dead = await self._send_nack(task.receipt, delay, error, give_up)
        if dead:
            self._hook(self.hooks.on_dead, task, err)

    async def _send_nack(
        self, receipt: str, delay: float, error: str = "", give_up: bool = False
    ) -> bool:
        request = queue_pb2.NackRequest(
            queue=self.queue, receipt=receipt, error=error, give_up=give_up
        )
        request.delay.FromMilliseconds(int(delay * 1000))
        try:
            reply = await self._rpc.call(self._rpc.queues.Nack, request)
        except TurnstileError as err:
            log.warning("nack failed: %s; the delivery comes back when its lease ends", err)
            return False
        return bool(reply.dead)

    async def _extend(self, run: _Run) -> None:
        """Extends the lease at two thirds of `visibility`, again and again; a stale
        receipt means the lease is gone: the handler's cancellation fires."""
        every = self.visibility * 2 / 3
        while True:
            await asyncio.sleep(every)
            request = queue_pb2.ExtendLeaseRequest(queue=self.queue, receipt=run.task.receipt)
            request.visibility.FromMilliseconds(int(self.visibility * 1000))
            reported = run.task._take_progress()
            if reported is not None:
                request.progress = reported
            try:
                reply = await self._rpc.call(
                    self._rpc.queues.ExtendLease, request, deadline=self.visibility / 3
                )
            except TurnstileError as err:
                log.warning("lease extension of task %s failed: %s", run.task.id, err)
                continue
            if not reply.extended:
                log.warning("lease of task %s lost; cancelling its handler", run.task.id)
                run.lost = True
                run.task.cancelled.set()
                if self._is_async and run.future is not None:
                    run.future.cancel()
                return
            if reply.cancelled:
                log.info("task %s cancelled while it ran; cancelling its handler", run.task.id)
                self._stop_task(run.task.receipt)
                return

    async def _drain(self, stream: "asyncio.Task[None]") -> None:
        self._draining = True
        self._acks.held = True
        futures = [r.future for r in self._running.values() if r.future is not None]
        if futures:
            _, late = await asyncio.wait(futures, timeout=self.drain_timeout)
            for run in list(self._running.values()):
                if run.future in late:
                    log.warning("task %s still running at the drain's end; giving it back", run.task.id)
                    self._cut.add(run.task.receipt)
                    run.task.cancelled.set()
                    run.future.cancel()
            if late:
                await asyncio.wait(late)
        stream.cancel()
        await asyncio.gather(stream, return_exceptions=True)
        await self._acks.flush()
        giving_back = [(r, 0.0, "", False) for r in self._unstarted + sorted(self._cut)]
        giving_back += self._held_nacks
        await asyncio.gather(*(self._send_nack(r, d, e, g) for r, d, e, g in giving_back))

    def _hook(self, hook: Optional[Callable[..., None]], *args: Any) -> None:
        if hook is None:
            return
        try:
            hook(*args)
        except Exception:
            log.exception("a worker hook failed")
