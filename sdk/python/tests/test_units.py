"""The library's own conversions, without a server."""

from __future__ import annotations

from datetime import timedelta

import pytest

from turnstile_client import Backoff, InvalidArgument
from turnstile_client._connection import parse_server
from turnstile_client._convert import payload_bytes, seconds


def test_durations_take_strings_numbers_and_timedeltas() -> None:
    assert seconds("30s") == 30
    assert seconds("250ms") == 0.25
    assert seconds("1h30m") == 5400
    assert seconds(timedelta(minutes=2)) == 120
    assert seconds(1.5) == 1.5
    with pytest.raises(InvalidArgument, match="ttl:"):
        seconds("soon", "ttl")
    with pytest.raises(InvalidArgument):
        seconds(-1)


def test_servers_parse_to_grpc_targets() -> None:
    assert parse_server("http://127.0.0.1:50051") == ("127.0.0.1:50051", False)
    assert parse_server("https://turnstile.internal:443") == ("turnstile.internal:443", True)
    assert parse_server("http://10.0.0.1:1,10.0.0.2:2") == ("ipv4:10.0.0.1:1,10.0.0.2:2", False)
    with pytest.raises(ValueError):
        parse_server("ftp://x:1")
    with pytest.raises(ValueError):
        parse_server("http://a:1,b:2")


def test_payloads_are_bytes_text_or_json() -> None:
    assert payload_bytes(b"\x00") == b"\x00"
    assert payload_bytes("é") == "é".encode()
    assert payload_bytes({"a": [1]}) == b'{"a":[1]}'


def test_backoff_grows_to_its_cap_within_its_jitter() -> None:
    backoff = Backoff(initial=1, factor=2, max=10, jitter=0.2)
    for attempt, base in [(1, 1), (2, 2), (3, 4), (10, 10)]:
        assert base * 0.8 <= backoff.delay(attempt) <= base * 1.2
