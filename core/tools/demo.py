"""The demo workload (``ember demo``): tasks, nested tasks, actors and large objects on a
local node, with what happened printed as it goes."""

from __future__ import annotations

import signal
import sys
import threading
import time

import ember


def run_demo(
    num_cpus: float | None = None, num_tasks: int = 2000, hold_seconds: float | None = None
) -> None:
    """Run the workload, then keep the node and its dashboard up for ``hold_seconds`` (None:
    until Ctrl-C when stdin is a terminal, else not at all) so the run can be looked at."""
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

    @ember.remote(max_retries=0)
    def parse_record(text: str) -> int:
        return int(text)

    try:
        ember.get(parse_record.remote("not a number"))
    except ValueError as e:
        # The dashboard keeps the traceback: its Overview and Tasks pages show it.
        last = str(e).strip().splitlines()[-1]
        print(f"A task that raised came back on get as a ValueError, with its traceback: {last}")

    _hold(ctx.dashboard_url, hold_seconds)
    ember.shutdown()
    print(f"Done; the node stopped. Total {time.perf_counter() - t0:.2f} s")


def _hold(dashboard_url: str, hold_seconds: float | None) -> None:
    if hold_seconds is None:
        hold_seconds = float("inf") if sys.stdin.isatty() else 0.0
    if hold_seconds <= 0:
        return
    until = "Ctrl-C" if hold_seconds == float("inf") else f"{hold_seconds:g} s or Ctrl-C"
    if dashboard_url:
        print(f"The dashboard shows this run at {dashboard_url} (its tasks, actors, timeline).")
    print("Try, in another terminal: ember status; ember list tasks; ember timeline")
    print(f"The node stays up until {until}.", flush=True)
    stop = threading.Event()
    # SIGTERM ends the hold like Ctrl-C does, so the node is stopped the same way.
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait(None if hold_seconds == float("inf") else hold_seconds)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
