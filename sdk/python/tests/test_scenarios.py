"""The twelve scenarios of SDK.md, against a real `turnstile serve` and `redis-server`."""

from __future__ import annotations

import hashlib
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Callable, Dict, List

import pytest

from harness import Redis, Server, eventually
from turnstile_client import (
    Backoff,
    Client,
    Fail,
    InvalidArgument,
    LeaseLost,
    LockState,
    NotFound,
    Retention,
    Retry,
    Task,
    TaskFailed,
    TaskSpec,
    Unauthenticated,
)

PROGRAMS = str(pathlib.Path(__file__).with_name("programs.py"))


def spawn(server_url: str, *args: str, **env: str) -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [sys.executable, PROGRAMS, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TURNSTILE_SERVER": server_url, **env},
    )


def read_log(path: str) -> List[str]:
    with open(path) as file:
        return [line.strip() for line in file if line.strip()]


def test_1_lock_sections_never_overlap_and_fencing_tokens_increase(server: Server) -> None:
    inside = 0
    entries: List[int] = []
    guard = threading.Lock()
    overlaps = []

    def contend(n: int) -> None:
        nonlocal inside
        with Client(server.url) as client:
            for _ in range(200):
                with client.lock("counter", ttl="10s", owner=f"w{n}") as lease:
                    with guard:
                        inside += 1
                        if inside != 1:
                            overlaps.append(inside)
                        entries.append(lease.fencing_token)
                    with guard:
                        inside -= 1

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []
    assert len(entries) == 1600
    assert all(a < b for a, b in zip(entries, entries[1:])), "fencing tokens strictly increase"


def test_2_a_lease_whose_redis_stops_past_its_ttl_is_lost_and_its_cancellation_fires(
    redis: Redis, server: Server
) -> None:
    with Client(server.url) as client:
        lease = client.lock("doomed", ttl="2s")
        fired = threading.Event()
        lease.on_lost(lambda reason: fired.set())
        redis.stop()
        stopped = time.monotonic()
        assert lease.lost.wait(2 + 2 + 1)
        assert time.monotonic() - stopped <= 2 + 2
        assert fired.wait(1)
        with pytest.raises(LeaseLost):
            lease.check()
        redis.start()


def test_3_a_lease_survives_a_restart_of_its_replica(redis: Redis) -> None:
    a = Server(redis)
    b = Server(redis)
    try:
        with Client(f"http://{a.addr},{b.addr}") as client:
            lease = client.lock("kept", ttl="3s")
            a.restart()
            b.restart()
            # Two TTLs after the restarts the lease is still held by the same fencing
            # token: the stream re-attached in time, each time.
            end = time.monotonic() + 6
            while time.monotonic() < end:
                assert not lease.lost.is_set(), lease.lost_reason
                time.sleep(0.1)
            assert client.check_fence("kept", lease.fencing_token)
            assert not lease.lost.is_set()
            assert lease.release()
    finally:
        a.close()
        b.close()


def test_4_a_killed_leader_is_followed_within_ttl_and_watchers_see_both(server: Server) -> None:
    seen: List[LockState] = []
    with Client(server.url) as client:
        def watch() -> None:
            for state in client.watch("leader"):
                seen.append(state)
                if len([s for s in seen if s.held]) >= 2:
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        first = spawn(server.url, "candidate", "leader", "node-a", "2s")
        assert first.stdout is not None
        assert first.stdout.readline().startswith("leading")
        second = spawn(server.url, "candidate", "leader", "node-b", "2s")
        assert second.stdout is not None
        try:
            eventually("the watcher sees node-a lead", lambda: any(s.owner == "node-a" for s in seen))
            first.send_signal(signal.SIGKILL)
            first.wait()
            killed = time.monotonic()
            line = second.stdout.readline()
            assert line.startswith("leading"), line
            assert time.monotonic() - killed <= 2 + 2
            watcher.join(10)
            owners = [s.owner for s in seen if s.held]
            assert owners[:1] == ["node-a"] and owners[-1] == "node-b", seen
            tokens = [s.fencing_token for s in seen if s.held]
            assert tokens == sorted(tokens)
        finally:
            for p in (first, second):
                p.kill()
                p.wait()


def test_5_a_semaphore_never_has_more_holders_than_its_limit(server: Server) -> None:
    holders = 0
    most = 0
    guard = threading.Lock()

    def hold(n: int) -> None:
        nonlocal holders, most
        with Client(server.url) as client:
            for _ in range(5):
                with client.semaphore("pool", limit=3, ttl="10s", owner=f"c{n}"):
                    with guard:
                        holders += 1
                        most = max(most, holders)
                    time.sleep(0.01)  # the work done under the permit
                    with guard:
                        holders -= 1

    threads = [threading.Thread(target=hold, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= most <= 3


def test_6_a_worker_handles_each_task_once_retries_failures_and_honours_retry(
    server: Server,
) -> None:
    handled: Counter[str] = Counter()
    attempts: Dict[str, List[float]] = {}
    guard = threading.Lock()

    def handle(task: Task) -> None:
        with guard:
            attempts.setdefault(task.id, []).append(time.monotonic())
        if task.id == "fails-once" and task.attempt == 1:
            raise RuntimeError("boom")
        if task.id == "retry-later" and task.attempt == 1:
            raise Retry("700ms")
        with guard:
            handled[task.id] += 1

    with Client(server.url) as client:
        queue = client.queue("jobs")
        ids: List[str] = []
        for start in range(0, 1000, 100):
            specs = [TaskSpec(payload=i) for i in range(start, start + 100)]
            ids += [e.id for e in queue.enqueue_many(specs)]
        queue.enqueue(b"x", id="fails-once")
        queue.enqueue(b"x", id="retry-later")
        worker = client.worker("jobs", handle, concurrency=8, backoff=Backoff(initial=0.3))
        runner = threading.Thread(target=worker.run)
        runner.start()
        eventually("every task handled", lambda: len(handled) == 1002, 60)
        eventually("every ack landed", lambda: queue.stats().in_flight == 0)
        worker.stop()
        runner.join(30)
        stats = queue.stats()
        assert (stats.ready, stats.delayed, stats.in_flight, stats.dead) == (0, 0, 0, 0)
    assert set(ids) <= set(handled)
    assert all(n == 1 for n in handled.values()), "each task handled and acked once"
    failed = attempts["fails-once"]
    assert len(failed) == 2 and failed[1] - failed[0] >= 0.3 * 0.8
    later = attempts["retry-later"]
    assert len(later) == 2 and later[1] - later[0] >= 0.7


def test_a_failure_s_text_is_the_task_s_last_error_and_fail_gives_up(server: Server) -> None:
    seen: Dict[str, List[str]] = {}
    guard = threading.Lock()

    def handle(task: Task) -> None:
        with guard:
            seen.setdefault(task.id, []).append(task.last_error)
        if task.id == "broken" and task.attempt == 1:
            raise RuntimeError("the disk is full")
        if task.id == "hopeless":
            raise Fail("no such customer")

    with Client(server.url) as client:
        queue = client.queue("outcomes")
        queue.enqueue(b"x", id="broken")
        queue.enqueue(b"x", id="hopeless")
        worker = client.worker("outcomes", handle, backoff=Backoff(initial=0.1))
        runner = threading.Thread(target=worker.run)
        runner.start()
        eventually("both ended", lambda: len(seen.get("broken", [])) == 2 and queue.stats().dead == 1)
        worker.stop()
        runner.join(30)
        # The retry saw why the first try failed: the exception and its stack trace.
        assert seen["broken"][0] == ""
        assert "RuntimeError: the disk is full" in seen["broken"][1]
        assert "Traceback" in seen["broken"][1]
        # Fail: DEAD on its first of 25 attempts, saying why.
        dead = queue.peek("dead", 10)
        assert [(t.id, t.attempt, t.last_error) for t in dead] == [("hopeless", 1, "no such customer")]


def test_progress_rides_on_the_extension_and_a_retry_resumes_from_it(server: Server) -> None:
    seen: List[bytes] = []

    with Client(server.url) as client:
        queue = client.queue("resumable")
        queue.enqueue(b"x", id="job")

        def handle(task: Task) -> None:
            seen.append(task.last_progress)
            if task.attempt > 1:
                return
            task.progress("step 3 of 5")
            # Fails once the server has it (the next extension carried it).
            eventually(
                "the progress kept",
                lambda: any(t.last_progress == b"step 3 of 5" for t in queue.peek("in_flight", 1)),
            )
            raise Retry(0)

        worker = client.worker("resumable", handle, visibility="600ms")
        runner = threading.Thread(target=worker.run)
        runner.start()
        eventually("the retry done", lambda: len(seen) == 2 and queue.stats().in_flight == 0)
        worker.stop()
        runner.join(30)
    assert seen == [b"", b"step 3 of 5"]


def test_7_a_handler_running_three_visibilities_is_not_delivered_twice(server: Server) -> None:
    deliveries: Counter[str] = Counter()

    def handle(task: Task) -> None:
        deliveries[task.id] += 1
        time.sleep(3.0)  # three times the visibility

    with Client(server.url) as client:
        queue = client.queue("long")
        queue.enqueue(b"slow", id="slow")
        worker = client.worker("long", handle, visibility="1s")
        runner = threading.Thread(target=worker.run)
        runner.start()
        eventually("the task is acked", lambda: deliveries["slow"] == 1 and queue.stats().in_flight == 0 and queue.stats().ready == 0, 30)
        worker.stop()
        runner.join(30)
    assert deliveries == Counter({"slow": 1})


def test_8_sigterm_drains_a_worker_process(server: Server) -> None:
    log = tempfile.mktemp(prefix="turnstile-py-worker-")
    with Client(server.url) as client:
        queue = client.queue("drain")
        ids = {queue.enqueue(i).id for i in range(40)}
        worker = spawn(server.url, "worker", "drain", log, "0.5")
        try:
            eventually("four handlers run", lambda: os.path.exists(log) and sum(1 for l in read_log(log) if l.startswith("start")) >= 4)
            worker.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            assert worker.wait(15) == 0, worker.stderr.read() if worker.stderr else ""
            assert time.monotonic() - sent <= 10
        finally:
            worker.kill()
        lines = read_log(log)
        started = {l.split()[1] for l in lines if l.startswith("start")}
        done = {l.split()[1] for l in lines if l.startswith("done")}
        assert started == done, "every running handler finished"
        assert lines[-1] == "exited"
        # What finished was acked; nothing else was: the rest are all back and ready.
        left = {t.id for t in queue.peek("ready", 100)}
        assert left == ids - done
        assert queue.stats().in_flight == 0


def test_9_a_killed_workers_tasks_reach_another_worker(server: Server) -> None:
    log = tempfile.mktemp(prefix="turnstile-py-worker-")
    handled: set = set()
    with Client(server.url) as client:
        queue = client.queue("crash")
        ids = set()
        for start in range(0, 1000, 250):
            ids |= {e.id for e in queue.enqueue_many([TaskSpec(payload=i) for i in range(start, start + 250)])}
        doomed = spawn(server.url, "worker", "crash", log, "0.01", CONCURRENCY="8")
        try:
            eventually("the doomed worker handles some", lambda: os.path.exists(log) and len(read_log(log)) >= 100)
            doomed.send_signal(signal.SIGKILL)
            doomed.wait()
        finally:
            doomed.kill()
        guard = threading.Lock()

        def handle(task: Task) -> None:
            with guard:
                handled.add(task.id)

        worker = client.worker("crash", handle, concurrency=8)
        runner = threading.Thread(target=worker.run)
        runner.start()
        done_by_doomed = {l.split()[1] for l in read_log(log) if l.startswith("done")}
        eventually("all 1,000 handled at least once", lambda: ids <= handled | done_by_doomed, 60)
        worker.stop()
        runner.join(30)


def test_10_producer_and_worker_through_a_server_restart(redis: Redis) -> None:
    server = Server(redis)
    handled: Counter[str] = Counter()
    enqueued: List[str] = []
    guard = threading.Lock()
    try:
        with Client(server.url) as client:
            queue = client.queue("restart")

            def handle(task: Task) -> None:
                with guard:
                    handled[task.id] += 1

            worker = client.worker("restart", handle, concurrency=4)
            runner = threading.Thread(target=worker.run)
            runner.start()

            def produce() -> None:
                for i in range(400):
                    enqueued.append(queue.enqueue({"n": i}).id)

            producer = threading.Thread(target=produce)
            producer.start()
            eventually("some tasks are in", lambda: len(enqueued) >= 100)
            server.kill()
            server.start()
            producer.join(60)
            assert len(enqueued) == 400
            eventually("every task handled", lambda: set(enqueued) <= set(handled), 60)
            eventually("the queue is empty", lambda: queue.stats().in_flight + queue.stats().ready == 0, 30)
            worker.stop()
            runner.join(30)
            # None enqueued twice: the library's ids made each retry a duplicate.
            assert len(set(enqueued)) == 400
            assert set(handled) == set(enqueued)
    finally:
        server.close()


def write_auth(tmp: pathlib.Path, token: str) -> str:
    path = tmp / "tokens.toml"
    digest = hashlib.sha256(token.encode()).hexdigest()
    path.write_text(
        f'[[token]]\nsha256 = "{digest}"\ntenant = "t"\n'
        'permissions = ["lock", "produce", "consume", "admin"]\n'
    )
    return str(path)


def test_11_errors_are_typed_and_name_the_field(start_server: Callable[..., Server], tmp_path: pathlib.Path) -> None:
    server = start_server("--auth-file", write_auth(tmp_path, "right-token"))
    with Client(server.url, token="right-token") as client:
        with pytest.raises(InvalidArgument) as bad:
            client.queue("bad\nname").enqueue(b"x")
        assert bad.value.message.startswith("queue"), bad.value.message
        with pytest.raises(InvalidArgument) as bad_lock:
            client.try_lock("", ttl="1s")
        assert bad_lock.value.message.startswith("name"), bad_lock.value.message
    with Client(server.url, token="wrong-token") as client:
        with pytest.raises(Unauthenticated):
            client.queue("q").stats()


def test_12_tls_with_a_private_ca_and_a_token_from_the_environment(
    start_server: Callable[..., Server], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca_key, ca = tmp_path / "ca.key", tmp_path / "ca.pem"
    key, csr, cert, ext = (tmp_path / n for n in ("s.key", "s.csr", "s.pem", "ext.cnf"))
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
        "-days", "1", "-subj", "/CN=turnstile test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", "1", "-extfile", str(ext))
    server = start_server(
        "--tls-cert", str(cert), "--tls-key", str(key), "--auth-file", write_auth(tmp_path, "s3cret")
    )
    monkeypatch.setenv("TURNSTILE_SERVER", f"https://{server.addr}")
    monkeypatch.setenv("TURNSTILE_TOKEN", "s3cret")
    monkeypatch.setenv("TURNSTILE_CA_CERT", str(ca))
    with Client() as client:
        with client.lock("over-tls", ttl="5s") as lease:
            assert lease.fencing_token > 0
        assert client.queue("tls").enqueue(b"x").created
    monkeypatch.delenv("TURNSTILE_TOKEN")
    with Client() as client:
        with pytest.raises(Unauthenticated):
            client.queue("tls").stats()


def test_watch_is_reopened_after_its_server_restarts(redis: Redis) -> None:
    server = Server(redis)
    try:
        with Client(server.url) as client:
            states = client.watch("watched")
            assert not next(states).held
            server.restart()
            lease = client.lock("watched", ttl="5s", owner="after-restart")
            state = next(states)
            assert state.held and state.owner == "after-restart", state
            assert state.fencing_token == lease.fencing_token
            lease.release()
    finally:
        server.close()


def test_a_call_returns_the_handler_s_result_and_a_failed_one_its_reason(server: Server) -> None:
    def handle(task: Task) -> object:
        n = task.json()["n"]
        if n == 13:
            raise Fail("unlucky")
        return {"square": n * n}

    with Client(server.url) as client:
        worker = client.worker("squares", handle, concurrency=2)
        runner = threading.Thread(target=worker.run)
        runner.start()
        queue = client.queue("squares")
        assert queue.call({"n": 7}, timeout="30s", id="seven") == b'{"square":49}'
        with pytest.raises(TaskFailed) as failed:
            queue.call({"n": 13}, timeout="30s", id="thirteen")
        assert (failed.value.state, failed.value.last_error) == ("dead", "unlucky")
        story = queue.get("thirteen")
        assert [(a.number, a.outcome, a.error) for a in story.history] == [(1, "gave_up", "unlucky")]
        # A finished task that is not kept is gone; waiting for it runs out.
        with pytest.raises(NotFound):
            queue.get("seven")
        assert queue.wait("seven", "200ms") is None
        worker.stop()
        runner.join(30)


def test_a_running_task_cancelled_fires_its_handler_s_cancellation(server: Server) -> None:
    started = threading.Event()
    told = threading.Event()

    def handle(task: Task) -> None:
        started.set()
        # A plain handler watches `task.cancelled`.
        if task.cancelled.wait(30):
            told.set()

    with Client(server.url) as client:
        worker = client.worker("endless", handle)
        runner = threading.Thread(target=worker.run)
        runner.start()
        queue = client.queue("endless")
        # Kept once ended, so a wait begun after the end still finds it.
        queue.configure(keep_completed=Retention(count=10))
        queue.enqueue(b"x", id="forever")
        assert started.wait(30)
        assert queue.cancel(["forever"], running=True) == ["forever"]
        ended = queue.wait("forever", "30s")
        assert ended is not None and ended.state == "cancelled"
        assert told.wait(30)
        [attempt] = ended.history
        assert (attempt.outcome, attempt.worker_id) == ("cancelled", worker.worker_id)
        stats = queue.stats()
        assert (stats.ready, stats.in_flight, stats.dead) == (0, 0, 0)
        worker.stop()
        runner.join(30)
