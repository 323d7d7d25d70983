"""Real processes for the scenarios: a `redis-server` and `turnstile serve` (the binary
named by TURNSTILE_BIN, else the repository's target/debug/turnstile) on free loopback
ports, each in a temp dir of its own and killed when the test ends. The same shape as
the other languages' harnesses: start Redis, start N replicas on it, restart or kill
either, read the server's ready line."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Callable, List, Optional

REPO = pathlib.Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def turnstile_bin() -> str:
    path = os.environ.get("TURNSTILE_BIN") or str(REPO / "target" / "debug" / "turnstile")
    if not os.access(path, os.X_OK):
        raise RuntimeError(
            f"no turnstile binary at {path}: run `cargo build` or set TURNSTILE_BIN"
        )
    return path


def eventually(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Waits until `check()` holds, polling observable state; fails naming `what`."""
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.01)


class Redis:
    """A redis-server on a free port; `stop()` and `start()` again on the same port."""

    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed")
        self.dir = tempfile.mkdtemp(prefix="turnstile-py-redis-")
        self.port = free_port()
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        eventually("redis answers", self._answers, 10)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Server:
    """`turnstile serve` on `redis`; its stderr kept line by line."""

    def __init__(self, redis: Redis, *extra: str, port: int = 0) -> None:
        self.redis = redis
        self.extra = list(extra)
        self.port = port or free_port()
        self.lines: List[str] = []
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        scheme = "https" if "--tls-cert" in self.extra else "http"
        return f"{scheme}://{self.addr}"

    def start(self) -> None:
        env = dict(os.environ)
        env.pop("TURNSTILE_TOKEN", None)
        process = subprocess.Popen(
            [turnstile_bin(), "serve", "--listen", self.addr, "--metrics-listen", "127.0.0.1:0",
             "--dashboard-listen", "off", "--redis-url", self.redis.url, "--log-format", "json",
             "--reattach-grace", "2s", "--shutdown-grace", "5s", *self.extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.process = process
        ready = threading.Event()

        def read() -> None:
            assert process.stderr is not None
            for raw in process.stderr:
                line = raw.decode(errors="replace")
                self.lines.append(line)
                if '"ready"' in line:
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(30):
            process.kill()
            raise RuntimeError("turnstile serve did not log ready:\n" + "".join(self.lines[-20:]))

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def terminate(self) -> None:
        """SIGTERM, as a rolling restart, and wait for the exit."""
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(30)
            self.process = None

    def restart(self) -> None:
        self.terminate()
        self.start()

    def close(self) -> None:
        self.kill()


def log_messages(server: Server) -> List[str]:
    out = []
    for line in server.lines:
        try:
            out.append(json.loads(line).get("fields", {}).get("message", ""))
        except ValueError:
            pass
    return out
