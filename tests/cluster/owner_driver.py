"""A driver run as its own process by ``test_owner_lifetime.py``.

    python owner_driver.py MODE GCS_ADDRESS TEMP_DIR

It connects to the test's cluster (where the ``far`` resource is, its tasks go) and, except
in ``fill``, leaves large objects on both nodes and prints READY. Then, as MODE says:
``exit``, ``shutdown`` and ``raise`` wait for a line on stdin (the test has seen the objects)
and exit normally still holding their refs, call ``ember.shutdown()`` (then wait for stdin to
close), or die of an uncaught exception; ``sigkill`` sleeps until the test kills it, with a
task and a detached actor's call still running (it prints the actor's id, for the test to
kill it); ``lend`` gives its refs to the ``keeper`` actor first, then sleeps. ``fill`` puts
the whole store's worth on each node and prints FILLED.
"""

from __future__ import annotations

import sys
import time

import ember
import numpy as np

MIB = 1024 * 1024
SIZE = 24 * MIB  # each object; a driver leaves 3 on each node (72 MiB of a 160 MiB store)
NAMESPACE = "owner-lifetime"
HELD: list = []  # module-level: still referenced when the interpreter exits


@ember.remote(resources={"far": 1})
def make(n: int) -> np.ndarray:
    return np.full(n, 3, dtype=np.uint8)


@ember.remote(resources={"far": 1})
def total(a: np.ndarray) -> int:
    return int(a.sum())


@ember.remote(resources={"far": 1})
def slow_make(n: int) -> np.ndarray:
    time.sleep(1.5)  # still running when the driver dies: its result comes late
    return np.full(n, 5, dtype=np.uint8)


@ember.remote(num_cpus=0, resources={"far": 0.5})
class LateWriter:
    """Detached, so it outlives the driver and writes a result for an owner that is gone
    (the driver's tasks are stopped with their job)."""

    def ready(self) -> bool:
        return True

    def make_slowly(self, n: int) -> np.ndarray:
        time.sleep(1.5)
        return np.full(n, 5, dtype=np.uint8)


@ember.remote(resources={"far": 1})
def fill_here(n: int, size: int) -> int:
    refs = [ember.put(np.full(size, 1, dtype=np.uint8)) for _ in range(n)]
    return sum(int(ember.get(r)[0]) for r in refs)


def leave_objects() -> list:
    """Large objects on both nodes: two puts here, one pulled to the far node; a task result
    made there and fetched here; one made there and left there."""
    a = ember.put(np.full(SIZE, 1, dtype=np.uint8))
    b = ember.put(np.full(SIZE, 2, dtype=np.uint8))
    fetched = make.remote(SIZE)
    assert int(ember.get(fetched, timeout=60)[0]) == 3  # a copy here too
    left_there = make.remote(SIZE)
    ember.wait([left_there], timeout=60, fetch_local=False)
    assert ember.get(total.remote(a), timeout=60) == SIZE  # a copy of `a` on the far node
    return [a, b, fetched, left_there]


def fill(capacity: int) -> None:
    # Five objects of just under a fifth of the store each, on each node: only an empty
    # store holds them all.
    n, size = 5, capacity // 5 - MIB
    here = [ember.put(np.full(size, 1, dtype=np.uint8)) for _ in range(n)]
    assert sum(int(ember.get(r)[0]) for r in here) == n
    del here
    assert ember.get(fill_here.remote(n, size), timeout=120) == n
    print("FILLED", flush=True)


def main() -> None:
    mode, address, temp_dir = sys.argv[1:4]
    ember.init(address=address, temp_dir=temp_dir, namespace=NAMESPACE, log_to_driver=False)
    if mode == "fill":
        fill(int(sys.argv[4]))
        return
    HELD.extend(leave_objects())
    if mode == "lend":
        keeper = ember.get_actor("keeper")
        ember.get(keeper.keep.remote(HELD), timeout=60)
    if mode == "sigkill":
        HELD.append(slow_make.remote(SIZE))
        writer = LateWriter.options(lifetime="detached").remote()
        ember.get(writer.ready.remote(), timeout=60)  # connected: the next call goes out now
        HELD.append(writer.make_slowly.remote(SIZE))
        time.sleep(0.3)
        print("WRITER", writer._ray_actor_id.hex(), flush=True)
    print("READY", flush=True)
    if mode in ("exit", "shutdown", "raise"):
        sys.stdin.readline()  # the test has seen the objects in the stores: end now
    if mode == "shutdown":
        ember.shutdown()
        print("SHUT_DOWN", flush=True)
        sys.stdin.read()  # alive until the test has seen the stores empty
    elif mode == "raise":
        raise RuntimeError("the driver crashes with its objects still referenced")
    elif mode in ("sigkill", "lend"):
        time.sleep(600)


if __name__ == "__main__":
    main()
