"""`AsyncClient` on the same real server: the asyncio twin of each area, and the calls
the scenarios do not reach (schedules, queue admin, watch's reopening)."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, List

import pytest

from harness import Server
from turnstile_client import AsyncClient, NotAcquired, Retention, Retry, Task, TaskSpec


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def test_async_lock_try_lock_and_wait(server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(server.url) as client:
            async with await client.lock("a", ttl="5s", owner="one") as lease:
                assert await client.try_lock("a", ttl="5s") is None
                with pytest.raises(NotAcquired):
                    await client.lock("a", ttl="5s", wait="200ms")
                assert await client.check_fence("a", lease.fencing_token)
            again = await client.try_lock("a", ttl="5s")
            assert again is not None and again.fencing_token > lease.fencing_token
            assert await again.release()
            assert not await again.release()

    run(main())


def test_async_worker_with_an_async_handler(server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(server.url) as client:
            queue = client.queue("aio")
            await queue.enqueue_many([TaskSpec(payload={"n": i}) for i in range(50)])
            seen: List[int] = []
            done = asyncio.Event()

            async def handle(task: Task) -> str:
                if task.json()["n"] == 7 and task.attempt == 1:
                    raise Retry("100ms")
                seen.append(task.json()["n"])
                if len(seen) == 50:
                    done.set()
                return "ok"

            worker = client.worker("aio", handle, concurrency=4)
            running = asyncio.create_task(worker.run(handle_signals=False))
            await asyncio.wait_for(done.wait(), 30)
            worker.stop()
            await asyncio.wait_for(running, 30)
            assert sorted(seen) == list(range(50))
            stats = await queue.stats()
            assert (stats.ready, stats.in_flight, stats.dead) == (0, 0, 0)

    run(main())


def test_async_watch_semaphore_and_queue_admin(server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(server.url) as client:
            states = client.watch("watched")
            first = await states.__anext__()
            assert not first.held
            lease = await client.lock("watched", ttl="5s", owner="w")
            held = await states.__anext__()
            assert held.held and held.owner == "w" and held.fencing_token == lease.fencing_token
            await lease.release()
            free = await states.__anext__()
            assert not free.held
            await states.aclose()

            permit = await client.semaphore("sem", limit=2, permits=2, ttl="5s")
            with pytest.raises(NotAcquired):
                await client.semaphore("sem", limit=2, ttl="5s", wait="100ms")
            await permit.release()

            queue = client.queue("admin")
            await queue.enqueue(b"a", id="a", delay="1h")
            assert [t.id for t in await queue.peek("delayed")] == ["a"]
            await queue.pause()
            assert (await queue.stats()).config.paused
            await queue.resume()
            config = await queue.configure(max_in_flight=5)
            assert config.max_in_flight == 5 and not config.paused
            assert await queue.cancel(["a"]) == ["a"]
            assert await queue.redrive() == 0

    run(main())


def test_async_schedules_round_trip(server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(server.url) as client:
            made = await client.schedules.put("nightly", "reports", cron="0 3 * * *", payload={"r": 1})
            assert made.next_fire_at is not None and made.cron == "0 3 * * *"
            await client.schedules.put("often", "reports", every="60s")
            assert [s.name for s in await client.schedules.list()] == ["nightly", "often"]
            assert (await client.schedules.pause("nightly")).paused
            assert not (await client.schedules.resume("nightly")).paused
            task_id = await client.schedules.trigger("nightly")
            assert [t.id for t in await client.queue("reports").peek()] == [task_id]
            assert await client.schedules.delete("nightly")
            assert await client.schedules.get("nightly") is None

    run(main())


def test_async_cancel_running_cancels_the_handler_and_call_returns_results(server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(server.url) as client:
            started = asyncio.Event()
            cancelled: List[str] = []

            async def handle(task: Task) -> bytes:
                if task.id == "forever":
                    started.set()
                    try:
                        await asyncio.Event().wait()  # never set: runs until cancelled
                    except asyncio.CancelledError:
                        cancelled.append(task.id)
                        raise
                return task.payload.upper()

            worker = client.worker("aio-outcomes", handle, concurrency=2)
            running = asyncio.create_task(worker.run(handle_signals=False))
            queue = client.queue("aio-outcomes")
            # Kept once ended, so a wait begun after the end still finds it.
            await queue.configure(keep_completed=Retention(count=10))
            assert await queue.call("shout", timeout="30s") == b"SHOUT"
            await queue.enqueue(b"x", id="forever")
            await asyncio.wait_for(started.wait(), 30)
            assert await queue.cancel(["forever"], running=True) == ["forever"]
            ended = await queue.wait("forever", "30s")
            assert ended is not None and ended.state == "cancelled"
            assert cancelled == ["forever"]
            worker.stop()
            await asyncio.wait_for(running, 30)

    run(main())
