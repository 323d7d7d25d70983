"""Fixtures: a real Redis and real servers per test (see harness.py)."""

from __future__ import annotations

import os
import sys
from typing import Callable, Iterator, List

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from harness import Redis, Server, turnstile_bin  # noqa: E402


@pytest.fixture
def redis() -> Iterator[Redis]:
    try:
        turnstile_bin()
    except RuntimeError as err:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(err))
    instance = Redis()
    yield instance
    instance.close()


@pytest.fixture
def start_server(redis: Redis) -> Iterator[Callable[..., Server]]:
    started: List[Server] = []

    def start(*extra: str) -> Server:
        server = Server(redis, *extra)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def server(start_server: Callable[..., Server]) -> Server:
    return start_server()
