#!/usr/bin/env python3
"""The least private memory a forked worker can have: children forked from a process that
imported what Ember's zygote imports (and froze its objects, as the zygote does), each doing
a little of what a worker does, then measured by unique set size::

    .venv/bin/python benchmarks/fork_floor.py [--children 10]

A child writes to every page holding an object it touches (reference counts), so running
any Python costs it copies of the parent's pages: this is the floor under the memory of an
idle actor (``benchmarks/many_actors.py`` measures the real one), and so under how many
actors fit one machine.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time


def uss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return sum(int(line.split()[1]) for line in f if line.startswith("Private_"))


def _sleep() -> None:
    time.sleep(60)


def _event_loop() -> None:
    import asyncio

    import uvloop

    loop = uvloop.new_event_loop()
    loop.run_until_complete(asyncio.sleep(0.2))
    time.sleep(60)


WORK = {"nothing (sleeps)": _sleep, "runs an event loop": _event_loop}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--children", type=int, default=10, help="children per kind of work")
    args = ap.parse_args(argv)
    sys.argv = sys.argv[:1]
    from ember.raylet import zygote

    zygote._preimport()
    gc.collect()
    gc.freeze()
    for what, work in WORK.items():
        kids = []
        for _ in range(args.children):
            pid = os.fork()
            if pid == 0:
                try:
                    work()
                finally:
                    os._exit(0)
            kids.append(pid)
        time.sleep(2.0)  # past the event loop's 0.2 s: every child is idle
        sizes = [uss_kib(p) for p in kids]
        for p in kids:
            os.kill(p, 9)
            os.waitpid(p, 0)
        print(f"a child that {what:20}: USS {statistics.median(sizes) / 1024:.2f} MiB (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
