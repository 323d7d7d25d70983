"""The library's worker against a hand-written loop on the raw stubs, in one run
(SDK.md's benchmark; ratios, never a timed test).

    python bench.py [--tasks 20000] [--rounds 2] [--concurrency 8]

Starts its own redis-server and `turnstile serve` (TURNSTILE_BIN, else the repository's
target/debug/turnstile; build with --release for figures worth comparing). Each round
enqueues the tasks, then drains them with a no-op handler: the raw loop (one Subscribe,
an Ack per task sent as soon as the task arrives), the AsyncClient worker, and the
Client worker (handlers on threads). Prints tasks/s of each and the library / raw
ratios."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from typing import Callable, Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "tests"))

from harness import Redis, Server  # noqa: E402
from turnstile_client import AsyncClient, Client, Task, TaskSpec  # noqa: E402
from turnstile_client.v1 import queue_pb2, queue_pb2_grpc  # noqa: E402

import grpc.aio  # noqa: E402


async def fill(url: str, queue: str, tasks: int) -> None:
    async with AsyncClient(url) as client:
        q = client.queue(queue)
        for start in range(0, tasks, 1000):
            await q.enqueue_many([TaskSpec(b"x") for _ in range(min(1000, tasks - start))])


async def raw_loop(url: str, queue: str, tasks: int, concurrency: int) -> float:
    channel = grpc.aio.insecure_channel(url.split("://", 1)[1])
    stub = queue_pb2_grpc.QueueServiceStub(channel)
    done = 0
    finished = asyncio.Event()

    async def ack(receipt: str) -> None:
        nonlocal done
        await stub.Ack(queue_pb2.AckRequest(queue=queue, receipts=[receipt]))
        done += 1
        if done == tasks:
            finished.set()

    started = time.perf_counter()
    call = stub.Subscribe(queue_pb2.SubscribeRequest(queue=queue, max_in_flight=concurrency))
    pending = set()

    async def consume() -> None:
        async for message in call:
            if message.WhichOneof("event") == "task":
                job = asyncio.create_task(ack(message.task.receipt))
                pending.add(job)
                job.add_done_callback(pending.discard)

    consumer = asyncio.create_task(consume())
    await finished.wait()
    elapsed = time.perf_counter() - started
    call.cancel()
    consumer.cancel()
    await channel.close()
    return tasks / elapsed


async def async_worker(url: str, queue: str, tasks: int, concurrency: int) -> float:
    async with AsyncClient(url) as client:
        done = 0
        finished = asyncio.Event()

        async def handle(task: Task) -> None:
            nonlocal done
            done += 1
            if done == tasks:
                finished.set()

        started = time.perf_counter()
        worker = client.worker(queue, handle, concurrency=concurrency)
        running = asyncio.create_task(worker.run(handle_signals=False))
        await finished.wait()
        stats = client.queue(queue)
        while (await stats.stats()).in_flight:  # the last acks landed
            await asyncio.sleep(0.001)
        elapsed = time.perf_counter() - started
        worker.stop()
        await running
        return tasks / elapsed


def sync_worker(url: str, queue: str, tasks: int, concurrency: int) -> float:
    import threading

    with Client(url) as client:
        done = 0
        guard = threading.Lock()
        finished = threading.Event()

        def handle(task: Task) -> None:
            nonlocal done
            with guard:
                done += 1
                if done == tasks:
                    finished.set()

        started = time.perf_counter()
        worker = client.worker(queue, handle, concurrency=concurrency)
        runner = threading.Thread(target=worker.run)
        runner.start()
        finished.wait()
        while client.queue(queue).stats().in_flight:
            time.sleep(0.001)
        elapsed = time.perf_counter() - started
        worker.stop()
        runner.join()
        return tasks / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    redis = Redis()
    server = Server(redis)
    runs: Dict[str, Callable[[str, str, int, int], float]] = {
        "raw": lambda *a: asyncio.run(raw_loop(*a)),
        "async": lambda *a: asyncio.run(async_worker(*a)),
        "sync": sync_worker,
    }
    rates: Dict[str, List[float]] = {name: [] for name in runs}
    try:
        for round_ in range(args.rounds):
            for name, run in runs.items():
                queue = f"bench-{name}-{round_}"
                asyncio.run(fill(server.url, queue, args.tasks))
                rates[name].append(run(server.url, queue, args.tasks, args.concurrency))
                print(f"round {round_ + 1} {name}: {rates[name][-1]:.0f} tasks/s", flush=True)
    finally:
        server.close()
        redis.close()
    raw = statistics.median(rates["raw"])
    for name in ("async", "sync"):
        rate = statistics.median(rates[name])
        print(f"{name} worker: {rate:.0f} tasks/s, {rate / raw:.2f} of the raw loop ({raw:.0f} tasks/s)")


if __name__ == "__main__":
    main()
