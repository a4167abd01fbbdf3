"""The demo workload (``ember demo``): tasks, nested tasks, actors and large objects on a
local node, with what happened printed as it goes."""

from __future__ import annotations

import time

import ember


def run_demo(num_cpus: float | None = None, num_tasks: int = 2000) -> None:
    t0 = time.perf_counter()
    ctx = ember.init(num_cpus=num_cpus)
    print(f"Started a local Ember node in {time.perf_counter() - t0:.2f} s")
    print(f"  session: {ctx.session_dir}")
    print(f"  resources: {ember.cluster_resources()}")

    @ember.remote
    def square(x: int) -> int:
        return x * x

    @ember.remote
    def tree_sum(depth: int) -> int:
        if depth == 0:
            return 1
        return sum(ember.get([tree_sum.remote(depth - 1), tree_sum.remote(depth - 1)]))

    @ember.remote
    class Accumulator:
        def __init__(self) -> None:
            self.total = 0

        def add(self, value: int) -> int:
            self.total += value
            return self.total

    t = time.perf_counter()
    results = ember.get([square.remote(i) for i in range(num_tasks)])
    dt = time.perf_counter() - t
    print(
        f"{num_tasks} tasks: sum of squares {sum(results)} in {dt:.2f} s "
        f"({num_tasks / dt:,.0f} tasks/s)"
    )

    t = time.perf_counter()
    print(
        f"A nested tree of tasks (depth 4) counted {ember.get(tree_sum.remote(4))} leaves "
        f"in {time.perf_counter() - t:.2f} s"
    )

    acc = Accumulator.remote()
    t = time.perf_counter()
    for i in range(500):
        acc.add.remote(i)
    print(
        f"An actor summed 0..499 = {ember.get(acc.add.remote(0))} "
        f"in {time.perf_counter() - t:.2f} s"
    )

    try:
        import numpy as np

        arr = np.random.default_rng(0).random(5_000_000)
        t = time.perf_counter()
        ref = ember.put(arr)
        back = ember.get(ref)
        print(
            f"A {arr.nbytes / 1e6:.0f} MB array went through shared memory and back in "
            f"{time.perf_counter() - t:.3f} s (read-only, zero-copy: "
            f"{not back.flags.writeable})"
        )
    except ImportError:
        pass

    ember.shutdown()
    print(f"Done; the node stopped. Total {time.perf_counter() - t0:.2f} s")
