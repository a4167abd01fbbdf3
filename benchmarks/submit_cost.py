"""The caller's own CPU per ``.remote()``: an actor call and a task, each submitted 1,000 at a
time, timed with ``time.thread_time`` on the submitting thread (the best of ``--rounds``).

    .venv/bin/python benchmarks/submit_cost.py [--rounds 25]

A steadier figure than a throughput row on a small shared VM (those move 15-30% run to run):
it counts only the submitting thread's CPU, which the submit path's cuts change, and not the
wake-ups and the other processes around it.
"""

from __future__ import annotations

import argparse
import time

import ember


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    ember.init()

    @ember.remote
    class Actor:
        def f(self) -> bytes:
            return b"ok"

    @ember.remote
    def task() -> bytes:
        return b"ok"

    actor = Actor.remote()
    ember.get([actor.f.remote(), task.remote()])
    try:
        for name, submit in (("actor call", actor.f.remote), ("task", task.remote)):
            best = float("inf")
            for _ in range(args.rounds):
                started = time.thread_time()
                refs = [submit() for _ in range(1000)]
                best = min(best, (time.thread_time() - started) / 1000 * 1e6)
                ember.get(refs)
            print(
                f"{name}: {best:.1f} us of the caller's thread per submit (best of {args.rounds})"
            )
    finally:
        ember.shutdown()


if __name__ == "__main__":
    main()
