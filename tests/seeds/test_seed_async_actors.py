"""Ray 0.8's documentation, "AsyncIO / Concurrency for Actors".

Async actor methods run concurrently in one event loop, object IDs can be awaited like
asyncio futures, and ``max_concurrency`` caps how many run at once. The document's top-level
``await`` lines ("run in ipython or a shell that supports top level await") run here inside
``asyncio.run``. The workers' "started"/"finished" prints are not checked: they go to the
workers' logs.
"""

from __future__ import annotations

import asyncio
import time

import ember as ray
import pytest

pytestmark = pytest.mark.timeout(120)


def test_async_actor_run_concurrent() -> None:
    """The first snippet: four 2 s calls overlap; then ``await`` on an actor call."""
    ray.init()

    @ray.remote
    class AsyncActor:
        # multiple invocation of this method can be running in
        # the event loop at the same time
        async def run_concurrent(self):
            print("started")
            await asyncio.sleep(2)  # concurrent workload here
            print("finished")

    actor = AsyncActor.remote()

    # regular ray.get
    started = time.monotonic()
    assert ray.get([actor.run_concurrent.remote() for _ in range(4)]) == [None] * 4
    # Four 2-second calls in one event loop: about 2 s, not 8 s (actor start-up included).
    assert time.monotonic() - started < 7.5

    # async ray.get
    async def main():
        return await actor.run_concurrent.remote()

    assert asyncio.run(main()) is None


@pytest.mark.ray_init()
def test_object_ids_as_asyncio_futures(ray_start: object) -> None:
    """ObjectIDs as asyncio.Futures: ``await ref`` and ``asyncio.wait([ref])``."""

    @ray.remote
    def some_task():
        return 1

    # Instead of:
    assert ray.get(some_task.remote()) == 1
    ready, not_ready = ray.wait([some_task.remote()])
    assert len(ready) == 1 and not_ready == []

    # you can do:
    async def main():
        value = await some_task.remote()
        done, pending = await asyncio.wait([some_task.remote()])
        return value, done, pending

    value, done, pending = asyncio.run(main())
    assert value == 1
    assert len(done) == 1 and not pending


@pytest.mark.ray_init()
def test_await_with_gather_and_timeout(ray_start: object) -> None:
    """ "refer to asyncio doc for more asyncio patterns including timeouts and gather"."""

    @ray.remote
    def some_task(x):
        return x

    @ray.remote
    def slow_task():
        time.sleep(30)

    async def main():
        gathered = await asyncio.gather(*[some_task.remote(i) for i in range(3)])
        try:
            await asyncio.wait_for(slow_task.remote(), timeout=0.5)
        except TimeoutError:
            return gathered, "timed out"
        return gathered, "finished"

    assert asyncio.run(main()) == ([0, 1, 2], "timed out")


@pytest.mark.ray_init()
def test_async_actor_fifty_tasks_at_once(ray_start: object) -> None:
    """Async Actor: "All 50 tasks should start at once. After 1 second they should all
    finish." """

    @ray.remote
    class AsyncActor:
        async def run_task(self):
            print("started")
            await asyncio.sleep(1)  # Network, I/O task here
            print("ended")

    actor = AsyncActor.remote()
    started = time.monotonic()
    # All 50 tasks should start at once. After 1 second they should all finish.
    # They should finish at the same time
    ray.get([actor.run_task.remote() for _ in range(50)])
    elapsed = time.monotonic() - started
    # Serially this would take 50 s; concurrently about 1 s plus actor start-up.
    assert 1.0 <= elapsed < 8


@pytest.mark.ray_init()
def test_async_actor_max_concurrency(ray_start: object) -> None:
    """``AsyncActor.options(max_concurrency=10)``: ten at a time, so five rounds of 1 s."""

    @ray.remote
    class AsyncActor:
        async def run_task(self):
            print("started")
            await asyncio.sleep(1)  # Network, I/O task here
            print("ended")

    actor = AsyncActor.options(max_concurrency=10).remote()

    started = time.monotonic()
    # Only 10 tasks will be running concurrently. Once 10 finish, the next 10 should run.
    ray.get([actor.run_task.remote() for _ in range(50)])
    elapsed = time.monotonic() - started
    # At most ten at once: at least five rounds; well under fifty serial seconds.
    assert 5.0 <= elapsed < 15


@pytest.mark.ray_init()
def test_async_actor_concurrency_is_capped(ray_start: object) -> None:
    """The same limit, observed from inside the actor: never more than 10 calls at once."""

    @ray.remote
    class AsyncActor:
        def __init__(self):
            self.running = 0
            self.peak = 0

        async def run_task(self, seconds):
            self.running += 1
            self.peak = max(self.peak, self.running)
            await asyncio.sleep(seconds)
            self.running -= 1

        async def peak_running(self):
            return self.peak

    actor = AsyncActor.options(max_concurrency=10).remote()
    ray.get([actor.run_task.remote(0.2) for _ in range(50)])
    assert ray.get(actor.peak_running.remote()) == 10

    unlimited = AsyncActor.remote()
    ray.get([unlimited.run_task.remote(1.0) for _ in range(50)])
    # "By default, 1000 tasks can be running concurrently": all 50 overlap.
    assert ray.get(unlimited.peak_running.remote()) == 50
