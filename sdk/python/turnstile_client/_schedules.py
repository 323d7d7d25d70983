"""Schedules (`ScheduleService`), typed; `list` walks every page."""

from __future__ import annotations

from typing import List, Optional

from ._convert import DurationLike, Payload, duration, instant, payload_bytes
from ._rpc import Rpc
from .errors import InvalidArgument, NotFound
from .types import Schedule
from .v1 import schedule_pb2

_OVERLAP = {"allow": schedule_pb2.OVERLAP_POLICY_ALLOW, "skip": schedule_pb2.OVERLAP_POLICY_SKIP}
_OVERLAP_NAMES = {v: k for k, v in _OVERLAP.items()}


def _from_pb(s: schedule_pb2.Schedule) -> Schedule:
    every = s.every.ToTimedelta().total_seconds() if s.WhichOneof("spec") == "every" else None
    catch_up = (
        s.catch_up_window.ToTimedelta().total_seconds() if s.HasField("catch_up_window") else None
    )
    return Schedule(
        name=s.name,
        queue=s.queue,
        cron=s.cron,
        every=every,
        time_zone=s.time_zone,
        payload=bytes(s.task.payload),
        overlap=_OVERLAP_NAMES.get(s.overlap, "allow"),
        catch_up=catch_up,
        paused=s.paused,
        next_fire_at=instant(s.next_fire_at, s.HasField("next_fire_at")),
        last_fire_at=instant(s.last_fire_at, s.HasField("last_fire_at")),
    )


class Schedules:
    """The tenant's schedules."""

    def __init__(self, rpc: Rpc) -> None:
        self._rpc = rpc

    async def put(
        self,
        name: str,
        queue: str,
        cron: Optional[str] = None,
        every: Optional[DurationLike] = None,
        time_zone: Optional[str] = None,
        payload: Payload = b"",
        overlap: str = "allow",
        catch_up: Optional[DurationLike] = None,
        paused: bool = False,
        max_attempts: int = 0,
        priority: int = 0,
        group: Optional[str] = None,
    ) -> Schedule:
        """Creates or replaces the schedule `name` (exactly one of `cron`, `every`)."""
        if (cron is None) == (every is None):
            raise InvalidArgument("cron: give exactly one of cron and every")
        if overlap not in _OVERLAP:
            raise InvalidArgument(f'overlap: "{overlap}" is not "allow" or "skip"')
        wire = schedule_pb2.Schedule(
            name=name,
            queue=queue,
            time_zone=time_zone or "",
            paused=paused,
            overlap=_OVERLAP[overlap],
            task=schedule_pb2.ScheduledTask(
                payload=payload_bytes(payload),
                max_attempts=max_attempts,
                priority=priority,
                group=group or "",
            ),
        )
        if cron is not None:
            wire.cron = cron
        else:
            assert every is not None
            wire.every.CopyFrom(duration(every, "every"))
        if catch_up is not None:
            wire.catch_up_window.CopyFrom(duration(catch_up, "catch_up"))
        return await self._put(wire)

    async def _put(self, wire: schedule_pb2.Schedule) -> Schedule:
        reply = await self._rpc.call(
            self._rpc.schedules.PutSchedule, schedule_pb2.PutScheduleRequest(schedule=wire)
        )
        return _from_pb(reply.schedule)

    async def _get_pb(self, name: str) -> schedule_pb2.Schedule:
        reply: schedule_pb2.GetScheduleResponse = await self._rpc.call(
            self._rpc.schedules.GetSchedule, schedule_pb2.GetScheduleRequest(name=name)
        )
        return reply.schedule

    async def get(self, name: str) -> Optional[Schedule]:
        """The schedule, or None when there is none."""
        try:
            return _from_pb(await self._get_pb(name))
        except NotFound:
            return None

    async def list(self, prefix: str = "") -> List[Schedule]:
        """Every schedule whose name starts with `prefix`, by name (all pages)."""
        found: List[Schedule] = []
        token = ""
        while True:
            reply = await self._rpc.call(
                self._rpc.schedules.ListSchedules,
                schedule_pb2.ListSchedulesRequest(page_size=1000, page_token=token),
            )
            found.extend(_from_pb(s) for s in reply.schedules if s.name.startswith(prefix))
            token = reply.next_page_token
            if not token:
                return found

    async def delete(self, name: str) -> bool:
        reply = await self._rpc.call(
            self._rpc.schedules.DeleteSchedule, schedule_pb2.DeleteScheduleRequest(name=name)
        )
        return bool(reply.deleted)

    async def pause(self, name: str) -> Schedule:
        return await self._set_paused(name, True)

    async def resume(self, name: str) -> Schedule:
        return await self._set_paused(name, False)

    async def _set_paused(self, name: str, paused: bool) -> Schedule:
        wire = await self._get_pb(name)
        wire.paused = paused
        return await self._put(wire)

    async def trigger(self, name: str) -> str:
        """Enqueues one task now; its id."""
        reply = await self._rpc.call(
            self._rpc.schedules.TriggerSchedule, schedule_pb2.TriggerScheduleRequest(name=name)
        )
        return str(reply.id)
