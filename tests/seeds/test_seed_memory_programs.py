"""Ray 0.8's documentation, "Memory Management": the ``ray memory`` reference-type programs.

Each of the five programs makes an object pinned for a different reason; the document shows
``ray memory`` (run from the command line while the program runs) listing the object with
that reference type. The test runs the program, then runs the CLI that comes with the
package (``ray memory``, or ``ember memory`` under Ember; with ``--address`` when the runtime
context gives a ``gcs_address``) and polls it until every expected ``(object ID, reference
type)`` pair shows up on one line. Also here: the ``lru_evict`` and
memory-quota settings the section shows.
"""

# The document's programs are kept as written, old spellings included.
# ruff: noqa: UP004

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import ember as ray
import pytest

pytestmark = pytest.mark.timeout(120)


def _cli() -> str:
    # The console script installed next to the interpreter: "ray", or "ember" for Ember.
    exe = Path(sys.executable).parent / ray.__name__
    if not exe.exists():
        pytest.skip(f"no {ray.__name__} command next to {sys.executable}")
    return str(exe)


def _cluster_address() -> list[str]:
    """``--address`` for this test's cluster, when the runtime says where it is: another
    local cluster on the machine (a benchmark, say) must not make the CLI guess."""
    try:
        address = getattr(ray.get_runtime_context(), "gcs_address", None)
    except Exception:
        address = None
    return ["--address", address] if address else []


def _memory_output() -> str:
    result = subprocess.run(
        [_cli(), "memory", *_cluster_address()],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    return result.stdout + result.stderr


def _shows(expected: dict[str, str]) -> Callable[[], bool]:
    """A predicate: the memory listing has each {object hex: reference type} on one line."""
    last: list[str] = [""]

    def check() -> bool:
        last[0] = _memory_output()
        lines = last[0].splitlines()
        return all(
            any(h in line and kind in line for line in lines) for h, kind in expected.items()
        )

    check.last = last  # type: ignore[attr-defined]
    return check


def _expect_memory(wait_for, expected: dict[str, str]) -> None:
    check = _shows(expected)
    try:
        wait_for(check, timeout=30, interval=0.5, what=f"ray memory to show {expected}")
    except BaseException:
        print(check.last[0])  # type: ignore[attr-defined]
        raise


@pytest.mark.ray_init()
def test_local_object_references(ray_start: object, wait_for) -> None:
    """1. Local ObjectID references: a ``put`` object and a task's return value."""

    @ray.remote
    def f(arg):
        return arg

    a = ray.put(None)
    b = f.remote(None)

    _expect_memory(wait_for, {a.hex(): "LOCAL_REFERENCE", b.hex(): "LOCAL_REFERENCE"})


@pytest.mark.ray_init()
def test_objects_pinned_in_memory(ray_start: object, wait_for) -> None:
    """2. Objects pinned in memory: a numpy array read zero-copy stays pinned after ``del``."""
    import numpy as np

    a = ray.put(np.zeros(1))
    b = ray.get(a)
    a_hex = a.hex()
    del a

    # "the deserialized copy (stored in b) points directly to the memory in the object store"
    assert not b.flags.writeable
    _expect_memory(wait_for, {a_hex: "PINNED_IN_MEMORY"})


@pytest.mark.ray_init()
def test_pending_task_references(ray_start: object, wait_for) -> None:
    """3. Pending task references: an argument of a task that is still running."""

    @ray.remote
    def f(arg):
        while True:
            pass

    a = ray.put(None)
    b = f.remote(a)

    _expect_memory(wait_for, {a.hex(): "USED_BY_PENDING_TASK", b.hex(): "LOCAL_REFERENCE"})


@pytest.mark.ray_init()
def test_serialized_object_references(ray_start: object, wait_for) -> None:
    """4. Serialized ObjectID references: the ID travels inside a list argument."""

    @ray.remote
    def f(arg):
        while True:
            pass

    a = ray.put(None)
    b = f.remote([a])

    _expect_memory(wait_for, {a.hex(): "USED_BY_PENDING_TASK", b.hex(): "LOCAL_REFERENCE"})


@pytest.mark.ray_init()
def test_captured_object_references(ray_start: object, wait_for) -> None:
    """5. Captured ObjectID references: an ID inside another ``put`` object keeps it alive."""
    a = ray.put(None)
    b = ray.put([a])
    a_hex = a.hex()
    del a

    _expect_memory(wait_for, {b.hex(): "LOCAL_REFERENCE", a_hex: "CAPTURED_IN_OBJECT"})
    # Still pinned: the captured object can be read through the outer one.
    assert ray.get(ray.get(b)[0]) is None


def test_lru_evict() -> None:
    """Enabling LRU Fallback: ``ray.init(lru_evict=True)``."""
    ray.init(lru_evict=True)

    @ray.remote
    def f():
        return 1

    assert ray.get(f.remote()) == 1


def test_memory_quotas() -> None:
    """Memory Quotas: node-wide limits at init, per-task and per-actor ``memory`` requests."""
    ray.init(
        memory=2000 * 1024 * 1024,
        object_store_memory=200 * 1024 * 1024,
        driver_object_store_memory=100 * 1024 * 1024,
    )

    # reserve 500MiB of available memory to place this task
    @ray.remote(memory=500 * 1024 * 1024)
    def some_function(x):
        pass

    # reserve 2.5GiB of available memory to place this actor
    @ray.remote(memory=2500 * 1024 * 1024)
    class SomeActor(object):
        def __init__(self, a, b):
            pass

        def ping(self):
            return "pong"

    # override the memory quota to 100MiB when submitting the task
    assert ray.get(some_function.options(memory=100 * 1024 * 1024).remote(x=1)) is None
    assert ray.get(some_function.remote(x=1)) is None

    # override the memory quota to 1GiB when creating the actor
    actor = SomeActor.options(memory=1000 * 1024 * 1024).remote(a=1, b=2)
    assert ray.get(actor.ping.remote()) == "pong"

    # The 2.5 GiB default does not fit in the node's 2000 MiB: that actor cannot be placed.
    too_big = SomeActor.remote(a=1, b=2)
    ready, _ = ray.wait([too_big.ping.remote()], timeout=1.0)
    assert ready == []
