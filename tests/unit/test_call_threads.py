"""A threaded actor's call threads: as many calls at once as the group's size, never fewer."""

from __future__ import annotations

import threading

import pytest
from ember.core_worker.call_threads import CallThreads


def test_calls_that_wait_for_each_other_all_run_up_to_the_size() -> None:
    # Three calls that each wait until all three run: with fewer than three threads they
    # would wait forever (the barrier's timeout turns that into a failure).
    threads = CallThreads(3, "t")
    barrier = threading.Barrier(3, timeout=30)
    names: list[str] = []
    done = threading.Event()

    def call() -> None:
        barrier.wait()
        names.append(threading.current_thread().name)
        if len(names) == 3:
            done.set()

    for _ in range(3):
        threads.submit(call)
    assert done.wait(30)
    assert sorted(names) == ["t_0", "t_1", "t_2"]
    threads.stop()


def test_never_more_threads_than_the_size() -> None:
    threads = CallThreads(2, "t")
    gate = threading.Event()
    ran = threading.Semaphore(0)

    def call() -> None:
        gate.wait(30)
        ran.release()

    for _ in range(10):
        threads.submit(call)
    assert len(threads._threads) == 2
    gate.set()
    for _ in range(10):
        assert ran.acquire(timeout=30)
    threads.stop()


def test_a_call_that_raises_leaves_its_thread_serving() -> None:
    threads = CallThreads(1, "t")
    after = threading.Event()

    def bad() -> None:
        raise RuntimeError("boom")

    threads.submit(bad)
    threads.submit(after.set)
    assert after.wait(30)
    threads.stop()
    for t in threads._threads:
        t.join(30)
        assert not t.is_alive()


def test_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        CallThreads(0, "t")
