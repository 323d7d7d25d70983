"""Programs the scenarios run as processes of their own (to SIGKILL or SIGTERM them):

    python programs.py candidate NAME OWNER TTL      campaign; print "leading <token>"
    python programs.py worker QUEUE LOG SECONDS      work the queue, logging start/done

The server comes from TURNSTILE_SERVER, as for any user of the library."""

from __future__ import annotations

import os
import sys
import threading
import time

from turnstile_client import Client, Task


def candidate(name: str, owner: str, ttl: str) -> None:
    with Client() as client:
        lease = client.campaign(name, owner=owner, ttl=ttl)
        print(f"leading {lease.fencing_token}", flush=True)
        threading.Event().wait()


def worker(queue: str, log_path: str, seconds: str) -> None:
    log = open(log_path, "a", buffering=1)
    lock = threading.Lock()

    def note(line: str) -> None:
        with lock:
            log.write(line + "\n")
            log.flush()
            os.fsync(log.fileno())

    def handle(task: Task) -> None:
        note(f"start {task.id}")
        time.sleep(float(seconds))  # the work itself
        note(f"done {task.id}")

    concurrency = int(os.environ.get("CONCURRENCY", "4"))
    with Client() as client:
        client.worker(queue, handle, concurrency=concurrency, drain_timeout="10s").run()
    note("exited")


if __name__ == "__main__":
    {"candidate": candidate, "worker": worker}[sys.argv[1]](*sys.argv[2:])
