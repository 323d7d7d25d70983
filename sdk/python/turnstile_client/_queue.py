"""A queue's calls, typed. Enqueue fills every missing task id with a random one before
the first try, so a call retried through UNAVAILABLE can never store a task twice."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Iterable, List, Optional, Sequence

from ._convert import DurationLike, Payload, duration, instant, payload_bytes, seconds, timestamp
from ._rpc import Rpc
from .errors import DeadlineExceeded, InvalidArgument, TaskFailed
from .types import TASK_STATES, Enqueued, QueueConfig, RateLimit, Retention, Stats, Task, TaskSpec

WAIT_MARGIN = 5.0
"""How much longer than a wait's own timeout its call may take (seconds): the server
answers "not done" at the timeout, and that answer must not be cut by the deadline."""
from .v1 import common_pb2, queue_pb2

_ON_DUPLICATE = {
    "keep": common_pb2.DUPLICATE_POLICY_KEEP,
    "replace": common_pb2.DUPLICATE_POLICY_REPLACE,
}


def _spec(spec: TaskSpec) -> queue_pb2.TaskSpec:
    if spec.on_duplicate not in _ON_DUPLICATE:
        raise InvalidArgument(f'on_duplicate: "{spec.on_duplicate}" is not "keep" or "replace"')
    if spec.delay is not None and spec.at is not None:
        raise InvalidArgument("delay: give delay or at, not both")
    wire = queue_pb2.TaskSpec(
        id=spec.id or uuid.uuid4().hex,
        payload=payload_bytes(spec.payload),
        on_duplicate=_ON_DUPLICATE[spec.on_duplicate],
        max_attempts=spec.max_attempts,
        group=spec.group or "",
        priority=spec.priority,
    )
    if spec.delay is not None:
        wire.delay.CopyFrom(duration(spec.delay, "delay"))
    if spec.at is not None:
        wire.due_at.CopyFrom(timestamp(spec.at))
    if spec.dedupe_window is not None:
        wire.dedupe_window.CopyFrom(duration(spec.dedupe_window, "dedupe_window"))
    return wire


def _rate(limit: RateLimit) -> queue_pb2.RateLimit:
    wire = queue_pb2.RateLimit(limit=limit.limit, burst=limit.burst)
    wire.period.CopyFrom(duration(limit.period, "period"))
    return wire


class Queue:
    """One queue of the client's tenant."""

    def __init__(self, rpc: Rpc, name: str) -> None:
        self._rpc = rpc
        self.name = name

    async def enqueue(
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
        """Adds one task (bytes as they are, a str as UTF-8, anything else as JSON)."""
        spec = TaskSpec(
            payload, id, delay, at, group, priority, max_attempts, dedupe_window, on_duplicate
        )
        return (await self.enqueue_many([spec]))[0]

    async def enqueue_many(self, specs: Iterable[TaskSpec]) -> List[Enqueued]:
        """Adds 1-1000 tasks atomically; one `Enqueued` per spec, in order."""
        request = queue_pb2.EnqueueRequest(queue=self.name, tasks=[_spec(s) for s in specs])
        reply = await self._rpc.call(self._rpc.queues.Enqueue, request)
        return [
            Enqueued(r.id, r.created, instant(r.due_at, r.HasField("due_at")), r.replaced)
            for r in reply.results
        ]

    async def stats(self) -> Stats:
        reply = await self._rpc.call(
            self._rpc.queues.Stats, queue_pb2.StatsRequest(queue=self.name)
        )
        return Stats(
            ready=reply.ready,
            delayed=reply.delayed,
            in_flight=reply.in_flight,
            dead=reply.dead,
            oldest_ready_at=instant(reply.oldest_ready_at, reply.HasField("oldest_ready_at")),
            next_due_at=instant(reply.next_due_at, reply.HasField("next_due_at")),
            config=QueueConfig.from_pb(reply.config),
        )

    async def peek(self, state: str = "ready", limit: int = 10) -> List[Task]:
        """Tasks of one state ("delayed", "ready", "in_flight", "dead") in delivery order."""
        if state not in TASK_STATES:
            raise InvalidArgument(f'state: "{state}" is not one of {", ".join(TASK_STATES)}')
        reply = await self._rpc.call(
            self._rpc.queues.Peek,
            queue_pb2.PeekRequest(queue=self.name, state=TASK_STATES[state], limit=limit),
        )
        return [Task.from_pb(t, self.name) for t in reply.tasks]

    async def cancel(self, ids: Sequence[str], running: bool = False) -> List[str]:
        """Removes tasks that are not in flight; with `running`, also cancels those in
        flight (their workers' handlers are told; they end "cancelled"). The ids removed
        or cancelled."""
        reply = await self._rpc.call(
            self._rpc.queues.Cancel,
            queue_pb2.CancelRequest(queue=self.name, ids=list(ids), running=running),
        )
        return list(reply.cancelled)

    async def get(self, id: str) -> Task:
        """The task in whatever state, with its delivery history, last error, progress
        and (a kept completed task) result; `NotFound` when the queue does not hold it."""
        reply = await self._rpc.call(
            self._rpc.queues.GetTask, queue_pb2.GetTaskRequest(queue=self.name, id=id)
        )
        return Task.from_pb(reply, self.name)

    async def wait(self, id: str, timeout: DurationLike) -> Optional[Task]:
        """Waits up to `timeout` (at most 1 h) for the task to be done (completed, dead
        or cancelled): the task as it ended, with its result and history, or None when
        it was not done in time."""
        request = queue_pb2.WaitRequest(queue=self.name, id=id)
        request.timeout.CopyFrom(duration(timeout, "timeout"))
        reply = await self._rpc.call(
            self._rpc.queues.Wait, request, deadline=seconds(timeout, "timeout") + WAIT_MARGIN
        )
        if not reply.done:
            return None
        return Task.from_pb(reply.task, self.name)

    async def call(
        self,
        payload: Payload = b"",
        timeout: DurationLike = "30s",
        id: Optional[str] = None,
        group: Optional[str] = None,
        priority: int = 0,
        max_attempts: int = 0,
    ) -> bytes:
        """A remote call through the queue: enqueues one task and waits up to `timeout`
        (at most 1 h) for a worker's result. The id is made before the first try, so a
        retried call joins the task its first try made. A task that went dead or was
        cancelled raises `TaskFailed` with its last error; not done in time,
        `DeadlineExceeded`."""
        spec = TaskSpec(payload, id, None, None, group, priority, max_attempts)
        request = queue_pb2.EnqueueRequest(queue=self.name, tasks=[_spec(spec)])
        request.wait.CopyFrom(duration(timeout, "timeout"))
        reply = await self._rpc.call(
            self._rpc.queues.Enqueue, request, deadline=seconds(timeout, "timeout") + WAIT_MARGIN
        )
        result = reply.results[0]
        if not result.done:
            raise DeadlineExceeded(f"task {result.id} not done within {timeout}")
        task = Task.from_pb(result.task, self.name)
        if task.state != "completed":
            raise TaskFailed(task.id, task.state, task.last_error)
        return task.result

    async def redrive(self, ids: Optional[Sequence[str]] = None) -> int:
        """Moves DEAD tasks (these, or all) back to READY; how many moved."""
        reply = await self._rpc.call(
            self._rpc.queues.Redrive,
            queue_pb2.RedriveRequest(queue=self.name, ids=list(ids or [])),
        )
        return int(reply.redriven)

    async def pause(self, group: Optional[str] = None) -> None:
        """Stops deliveries of the queue, or of one group ("" is the ungrouped tasks)."""
        await self._set_paused(group, True)

    async def resume(self, group: Optional[str] = None) -> None:
        await self._set_paused(group, False)

    async def _set_paused(self, group: Optional[str], paused: bool) -> None:
        if group is None:
            await self._rpc.call(
                self._rpc.queues.ConfigureQueue,
                queue_pb2.ConfigureQueueRequest(queue=self.name, paused=paused),
            )
        else:
            await self._rpc.call(
                self._rpc.queues.ConfigureGroup,
                queue_pb2.ConfigureGroupRequest(queue=self.name, group=group, paused=paused),
            )

    async def configure(
        self,
        paused: Optional[bool] = None,
        max_in_flight: Optional[int] = None,
        group_max_in_flight: Optional[int] = None,
        rate_limit: Optional[RateLimit] = None,
        group_rate_limit: Optional[RateLimit] = None,
        keep_completed: Optional[Retention] = None,
        keep_dead: Optional[Retention] = None,
    ) -> QueueConfig:
        """Changes the fields given (a `RateLimit(0)` removes a limit, a `Retention()`
        keeps nothing); the config now."""
        request = queue_pb2.ConfigureQueueRequest(queue=self.name)
        if paused is not None:
            request.paused = paused
        if max_in_flight is not None:
            request.max_in_flight = max_in_flight
        if group_max_in_flight is not None:
            request.group_max_in_flight = group_max_in_flight
        if rate_limit is not None:
            request.rate_limit.CopyFrom(_rate(rate_limit))
        if group_rate_limit is not None:
            request.group_rate_limit.CopyFrom(_rate(group_rate_limit))
        for name, keep in (("keep_completed", keep_completed), ("keep_dead", keep_dead)):
            if keep is not None:
                wire = getattr(request, name)
                wire.count = keep.count
                wire.SetInParent()
                if keep.age:
                    wire.age.CopyFrom(duration(keep.age, f"{name}.age"))
        reply = await self._rpc.call(self._rpc.queues.ConfigureQueue, request)
        return QueueConfig.from_pb(reply.config)
