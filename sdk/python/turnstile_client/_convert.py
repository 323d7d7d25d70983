"""Durations, instants and payloads between Python and the wire."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Optional, Union

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from .errors import InvalidArgument

DurationLike = Union[timedelta, str, int, float]
"""A duration: a `timedelta`, seconds as a number, or a string like "30s", "1.5s",
"250ms", "2m", "1h30m"."""

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def seconds(value: DurationLike, field: str = "duration") -> float:
    """Seconds in `value`; InvalidArgument naming `field` for anything else."""
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, bool):
        raise InvalidArgument(f"{field}: a duration, not a bool")
    elif isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str):
        text = value.strip()
        parts = _PART.findall(text)
        if not text or "".join(n + u for n, u in parts) != text:
            raise InvalidArgument(f'{field}: "{value}" is not a duration like "30s", "250ms", "1h30m"')
        result = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise InvalidArgument(f"{field}: a duration, not {type(value).__name__}")
    if result < 0:
        raise InvalidArgument(f"{field}: must not be negative")
    return result


def duration(value: DurationLike, field: str = "duration") -> Duration:
    total = seconds(value, field)
    whole = int(total)
    return Duration(seconds=whole, nanos=int(round((total - whole) * 1e9)))


def optional_duration(value: Optional[DurationLike], field: str) -> Optional[Duration]:
    return None if value is None else duration(value, field)


def timestamp(value: datetime) -> Timestamp:
    stamp = Timestamp()
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    stamp.FromDatetime(value.astimezone(timezone.utc).replace(tzinfo=None))
    return stamp


def instant(stamp: Timestamp, present: bool = True) -> Optional[datetime]:
    """A timezone-aware UTC datetime, or None for an unset field."""
    if not present or (stamp.seconds == 0 and stamp.nanos == 0):
        return None
    return datetime.fromtimestamp(stamp.seconds + stamp.nanos / 1e9, tz=timezone.utc)


Payload = Union[bytes, bytearray, memoryview, str, Any]
"""What a task carries: bytes as they are, a str as UTF-8, anything else as JSON."""


def payload_bytes(value: Payload) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()
