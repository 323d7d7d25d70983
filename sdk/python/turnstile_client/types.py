"""The values the library hands out and takes: plain dataclasses over the wire types."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, List, Optional, Union

from ._convert import DurationLike, Payload, instant
from .v1 import common_pb2, queue_pb2

TASK_STATES = {
    "delayed": common_pb2.TASK_STATE_DELAYED,
    "ready": common_pb2.TASK_STATE_READY,
    "in_flight": common_pb2.TASK_STATE_IN_FLIGHT,
    "dead": common_pb2.TASK_STATE_DEAD,
    "completed": common_pb2.TASK_STATE_COMPLETED,
    "cancelled": common_pb2.TASK_STATE_CANCELLED,
}
_STATE_NAMES = {v: k for k, v in TASK_STATES.items()}


_OUTCOMES = {
    common_pb2.ATTEMPT_OUTCOME_ACKED: "acked",
    common_pb2.ATTEMPT_OUTCOME_NACKED: "nacked",
    common_pb2.ATTEMPT_OUTCOME_EXPIRED: "expired",
    common_pb2.ATTEMPT_OUTCOME_GAVE_UP: "gave_up",
    common_pb2.ATTEMPT_OUTCOME_CANCELLED: "cancelled",
}


@dataclass(frozen=True)
class Attempt:
    """One delivery of a task as its history keeps it: `outcome` is "acked", "nacked",
    "expired" (its lease ran out or its stream closed), "gave_up" or "cancelled"."""

    number: int
    worker_id: str
    leased_at: Optional[datetime]
    ended_at: Optional[datetime]
    outcome: str
    error: str

    @classmethod
    def from_pb(cls, attempt: common_pb2.Attempt) -> "Attempt":
        return cls(
            number=attempt.number,
            worker_id=attempt.worker_id,
            leased_at=instant(attempt.leased_at, attempt.HasField("leased_at")),
            ended_at=instant(attempt.ended_at, attempt.HasField("ended_at")),
            outcome=_OUTCOMES.get(attempt.outcome, "unspecified"),
            error=attempt.error,
        )


@dataclass
class Task:
    """A task as delivered to a worker (with `receipt`) or as peeked (without)."""

    id: str
    payload: bytes
    attempt: int
    max_attempts: int
    group: str
    priority: int
    enqueued_at: Optional[datetime]
    due_at: Optional[datetime]
    state: str = "ready"
    receipt: str = ""
    lease_expires_at: Optional[datetime] = None
    queue: str = ""
    last_error: str = ""
    """Why its last delivery failed, as that Nack said ('' when none did)."""
    last_progress: bytes = b""
    """The latest progress a handler reported on it (`progress()`), as this delivery
    found it: where a retry may resume (empty when none was reported)."""
    history: List[Attempt] = field(default_factory=list)
    """Its deliveries that ended, oldest first (filled by `get`, `wait` and `call`)."""
    result: bytes = b""
    """What its handler returned (a finished task, from `get` when kept, and `wait`)."""
    _reported: Optional[bytes] = field(default=None, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)
    cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    """Set when this delivery's lease is lost, the task was cancelled while it ran
    (`cancel(ids, running=True)`), or the worker's drain ran out of time."""

    def progress(self, data: Union[bytes, str]) -> None:
        """Records the handler's latest word on a long task (at most 4 KiB): it rides on
        the next lease extension and is kept with the task, so a later delivery's
        `last_progress` carries it. A newer report replaces one not sent yet."""
        with self._guard:
            self._reported = data.encode() if isinstance(data, str) else bytes(data)

    def _take_progress(self) -> Optional[bytes]:
        with self._guard:
            reported, self._reported = self._reported, None
            return reported

    def text(self) -> str:
        return self.payload.decode()

    def json(self) -> Any:
        return json.loads(self.payload)

    @classmethod
    def from_pb(cls, task: common_pb2.Task, queue: str = "") -> "Task":
        return cls(
            id=task.id,
            payload=bytes(task.payload),
            attempt=task.attempt,
            max_attempts=task.max_attempts,
            group=task.group,
            priority=task.priority,
            enqueued_at=instant(task.enqueued_at),
            due_at=instant(task.due_at),
            state=_STATE_NAMES.get(task.state, "ready"),
            receipt=task.receipt,
            lease_expires_at=instant(task.lease_expires_at),
            queue=queue,
            last_error=task.last_error,
            last_progress=bytes(task.progress),
            history=[Attempt.from_pb(a) for a in task.history],
            result=bytes(task.result),
        )


@dataclass(frozen=True)
class Enqueued:
    """What `enqueue` did: the id (made by the library when none was given), whether a
    new task was stored, and when it is due."""

    id: str
    created: bool
    due_at: Optional[datetime]
    replaced: bool = False


@dataclass
class TaskSpec:
    """One task for `enqueue_many`; the fields of `Queue.enqueue`."""

    payload: Payload = b""
    id: Optional[str] = None
    delay: Optional[DurationLike] = None
    at: Optional[datetime] = None
    group: Optional[str] = None
    priority: int = 0
    max_attempts: int = 0
    dedupe_window: Optional[DurationLike] = None
    on_duplicate: str = "keep"


@dataclass(frozen=True)
class RateLimit:
    """At most `limit` starts per `period` (seconds), `burst` at once (0: = limit)."""

    limit: int
    period: float = 1.0
    burst: int = 0


@dataclass(frozen=True)
class Retention:
    """Which ended tasks a queue keeps: each at most `age` seconds after it ended (0: no
    bound by age) and at most the newest `count` (0: no bound by count); both 0 keep
    nothing (for `keep_dead`: keep every DEAD task, the default)."""

    age: float = 0.0
    count: int = 0


@dataclass(frozen=True)
class QueueConfig:
    paused: bool
    max_in_flight: int
    rate_limit: Optional[RateLimit]
    group_max_in_flight: int
    group_rate_limit: Optional[RateLimit]
    keep_completed: Optional[Retention] = None
    keep_dead: Optional[Retention] = None

    @classmethod
    def from_pb(cls, config: queue_pb2.QueueConfig) -> "QueueConfig":
        def rate(limit: queue_pb2.RateLimit, present: bool) -> Optional[RateLimit]:
            if not present or limit.limit == 0:
                return None
            period = limit.period.ToTimedelta().total_seconds() or 1.0
            return RateLimit(limit.limit, period, limit.burst)

        return cls(
            paused=config.paused,
            max_in_flight=config.max_in_flight,
            rate_limit=rate(config.rate_limit, config.HasField("rate_limit")),
            group_max_in_flight=config.group_max_in_flight,
            group_rate_limit=rate(config.group_rate_limit, config.HasField("group_rate_limit")),
            keep_completed=(
                Retention(config.keep_completed.age.ToTimedelta().total_seconds(), config.keep_completed.count)
                if config.HasField("keep_completed")
                else None
            ),
            keep_dead=(
                Retention(config.keep_dead.age.ToTimedelta().total_seconds(), config.keep_dead.count)
                if config.HasField("keep_dead")
                else None
            ),
        )


@dataclass(frozen=True)
class Stats:
    ready: int
    delayed: int
    in_flight: int
    dead: int
    oldest_ready_at: Optional[datetime]
    next_due_at: Optional[datetime]
    config: QueueConfig


@dataclass(frozen=True)
class LockState:
    """One state of a watched lock: who holds it (`held`), or that it is free."""

    held: bool
    owner: str
    fencing_token: int
    expires_at: Optional[datetime]


@dataclass(frozen=True)
class Schedule:
    name: str
    queue: str
    cron: str
    every: Optional[float]
    time_zone: str
    payload: bytes
    overlap: str
    catch_up: Optional[float]
    paused: bool
    next_fire_at: Optional[datetime]
    last_fire_at: Optional[datetime]


class Fail(Exception):
    """Raise from a handler to give up on the task: DEAD now, whatever attempts remain,
    with `reason` as its last error."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Retry(Exception):
    """Raise from a handler to give the task back, due again after `delay`."""

    def __init__(self, delay: DurationLike = 0, reason: str = "") -> None:
        super().__init__(reason or f"retry after {delay}")
        self.delay = delay

