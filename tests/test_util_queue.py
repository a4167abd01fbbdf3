"""``ember.util.queue.Queue``: Ray's actor-backed FIFO queue, driven from the driver, tasks,
actors and asyncio code. Every blocking call here has a timeout or is unblocked by the test."""

from __future__ import annotations

import asyncio
import queue as stdlib_queue
import time

import ember
import pytest
from ember.exceptions import ActorDiedError
from ember.util.queue import Empty, Full, Queue


@ember.remote
def produce(q: Queue, items: list) -> int:
    for item in items:
        q.put(item, timeout=30)
    return len(items)


@ember.remote
def consume(q: Queue, n: int) -> list:
    return [q.get(timeout=30) for _ in range(n)]


@ember.remote
class Consumer:
    def __init__(self, q: Queue) -> None:
        self.q = q

    def take(self, n: int) -> list:
        return self.q.get_nowait_batch(n)


def test_exceptions_are_the_standard_librarys():
    assert issubclass(Empty, stdlib_queue.Empty)
    assert issubclass(Full, stdlib_queue.Full)


def test_fifo_and_sizes(shared_node):
    q = Queue()
    assert q.empty() and not q.full() and q.size() == 0 and len(q) == 0
    for i in range(5):
        q.put(i)
    assert q.qsize() == 5 and len(q) == 5 and not q.empty()
    assert [q.get() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert q.empty()
    q.shutdown()


def test_maxsize_nonblocking_and_timeouts(shared_node):
    q = Queue(maxsize=2)
    q.put("a")
    q.put_nowait("b")
    assert q.full()
    with pytest.raises(Full):
        q.put("c", block=False)
    with pytest.raises(stdlib_queue.Full):  # caught as the standard library's too
        q.put_nowait("c")
    start = time.monotonic()
    with pytest.raises(Full):
        q.put("c", timeout=0.3)
    assert 0.25 <= time.monotonic() - start < 10
    with pytest.raises(ValueError, match="non-negative"):
        q.put("c", timeout=-1)
    # An item there is returned even with timeout=0 (Ray's zero timeout gives up first).
    assert q.get(timeout=0) == "a"
    assert q.get_nowait() == "b"
    with pytest.raises(Empty):
        q.get_nowait()
    with pytest.raises(Empty):
        q.get(block=False)
    start = time.monotonic()
    with pytest.raises(Empty):
        q.get(timeout=0.3)
    assert 0.25 <= time.monotonic() - start < 10
    with pytest.raises(ValueError, match="non-negative"):
        q.get(timeout=-0.1)
    q.shutdown()


def test_batches_are_all_or_nothing(shared_node):
    q = Queue(maxsize=3)
    q.put_nowait_batch([1, 2])
    with pytest.raises(Full, match="Cannot add 2 items"):
        q.put_nowait_batch([3, 4])
    assert q.qsize() == 2  # nothing of the refused batch went in
    q.put_nowait_batch(iter([3]))  # any iterable
    with pytest.raises(Empty, match="Cannot get 4 items"):
        q.get_nowait_batch(4)
    assert q.get_nowait_batch(0) == []
    assert q.get_nowait_batch(3) == [1, 2, 3]
    with pytest.raises(TypeError):
        q.put_nowait_batch(5)
    with pytest.raises(TypeError):
        q.get_nowait_batch(1.5)
    with pytest.raises(ValueError):
        q.get_nowait_batch(-1)
    q.shutdown()


def test_blocking_get_waits_for_a_task_to_put(shared_node):
    q = Queue()
    taken = consume.remote(q, 3)  # blocks inside the actor until items come
    time.sleep(0.2)
    assert ember.get(produce.remote(q, ["x", "y", "z"]), timeout=60) == 3
    assert ember.get(taken, timeout=60) == ["x", "y", "z"]
    q.shutdown()


def test_blocking_put_waits_for_room(shared_node):
    q = Queue(maxsize=1)
    sent = produce.remote(q, list(range(4)))  # can only finish as the driver takes items
    got = [q.get(timeout=30) for _ in range(4)]
    assert got == [0, 1, 2, 3]
    assert ember.get(sent, timeout=60) == 4
    q.shutdown()


def test_handle_passed_to_an_actor(shared_node):
    q = Queue()
    consumer = Consumer.remote(q)
    q.put_nowait_batch(["p", "q"])
    assert ember.get(consumer.take.remote(2), timeout=60) == ["p", "q"]
    q.shutdown()


def test_async_variants(shared_node):
    q = Queue(maxsize=1)

    async def main() -> list:
        out = []
        await q.put_async(1)
        try:
            await q.put_async(2, block=False)
        except Full:
            out.append("full")
        try:
            await q.put_async(2, timeout=0.2)
        except Full:
            out.append("full after timeout")
        out.append(await q.get_async())
        try:
            await q.get_async(block=False)
        except Empty:
            out.append("empty")
        try:
            await q.get_async(timeout=0.2)
        except Empty:
            out.append("empty after timeout")
        # A waiting get_async is served by a put from a task while the loop stays free.
        waiter = asyncio.ensure_future(q.get_async(timeout=30))
        await asyncio.sleep(0.1)
        await asyncio.wrap_future(produce.remote(q, ["late"]).future())
        out.append(await waiter)
        return out

    got = asyncio.run(asyncio.wait_for(main(), 60))
    assert got == ["full", "full after timeout", 1, "empty", "empty after timeout", "late"]
    with pytest.raises(ValueError):
        asyncio.run(q.get_async(timeout=-1))
    q.shutdown()


def test_actor_options_name_the_actor(shared_node):
    q = Queue(actor_options={"name": "util-queue-test", "num_cpus": 0})
    q.put("via name")
    found = ember.get_actor("util-queue-test")
    assert ember.get(found.get.remote(None), timeout=30) == (True, "via name")
    q.shutdown()


def test_shutdown_fails_waiters_and_later_calls(shared_node):
    q = Queue()
    waiting = consume.remote(q, 1)
    time.sleep(0.3)
    q.shutdown(grace_period_s=10)  # graceful: the actor exits; the waiter's get fails
    with pytest.raises(Exception) as info:
        ember.get(waiting, timeout=60)
    assert isinstance(info.value, ActorDiedError) or "ActorDiedError" in str(info.value)
    with pytest.raises(RuntimeError, match="shut down"):
        q.put(1)
    q.shutdown()  # a second shutdown is harmless

    forced = Queue()
    forced.put(1)
    actor = forced.actor
    forced.shutdown(force=True)
    with pytest.raises(ActorDiedError):
        ember.get(actor.qsize.remote(), timeout=60)
