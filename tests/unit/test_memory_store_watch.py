"""The memory store's generation watch, which ``wait`` on many refs sleeps on."""

from __future__ import annotations

import threading
import time

from ember.core_worker.memory_store import MemoryStore


def test_a_put_from_another_thread_wakes_the_watcher_at_once() -> None:
    store = MemoryStore()
    store.add_pending(b"a")
    generation = store.generation
    timer = threading.Timer(0.2, store.put, (b"a", ("inline", 0, b"x", [])))
    timer.start()
    start = time.monotonic()
    assert store.wait_for_change(generation, timeout=30) is True
    assert time.monotonic() - start < 10
    assert store.get_if_ready(b"a") == ("inline", 0, b"x", [])
    timer.join()


def test_a_change_before_the_watch_returns_without_blocking() -> None:
    store = MemoryStore()
    generation = store.generation
    store.put(b"b", ("inline", 0, b"y", []))
    start = time.monotonic()
    assert store.wait_for_change(generation, timeout=30) is True
    assert time.monotonic() - start < 1


def test_no_change_ends_at_the_timeout_and_touch_wakes() -> None:
    store = MemoryStore()
    generation = store.generation
    start = time.monotonic()
    assert store.wait_for_change(generation, timeout=0.2) is False
    assert 0.15 <= time.monotonic() - start < 10
    timer = threading.Timer(0.1, store.touch)
    timer.start()
    assert store.wait_for_change(generation, timeout=30) is True
    timer.join()


def test_first_ready_and_unknown_follow_puts_deletes_and_resets():
    store = MemoryStore()
    ids = [bytes([i]) * 4 for i in range(6)]
    store.add_pending_many(ids[:4])
    assert store.first_ready(ids) == -1
    assert store.unknown(ids) == ids[4:]
    store.put(ids[2], ("inline", b"", b"x", []))
    store.put(ids[3], ("inline", b"", b"y", []))
    assert store.first_ready(ids) == 2
    store.reset(ids[2])  # being rebuilt from its lineage: pending again
    assert store.first_ready(ids) == 3
    store.delete(ids[3])
    assert store.first_ready(ids) == -1
    assert store.unknown(ids) == [ids[3], ids[4], ids[5]]
