#!/usr/bin/env python3
"""Writes ``core/raylet/hot_code_names.py``: the functions forked workers run, by name::

    .venv/bin/python scripts/hot_code.py            # write the list
    .venv/bin/python scripts/hot_code.py --check    # exit 1 if the list misses too much

Starts a node whose workers trace the functions they call (``EMBER_WORKER_MEMORY_TRACE``),
creates an actor and calls it, runs a task, and asks each worker which functions it ran or
bound since its fork in modules its zygote had imported (``memory_trace.hot_functions``). The
zygote lays those out together before forking (``ember.raylet.hot_code``). ``--check``
compares instead of writing: it fails when the list covers less than ``--min-cover`` of
what the workers ran (code moved on since the list was written: run without ``--check``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HEADER = '''"""The functions a forked worker runs or binds to start, take an actor or a task and
answer it, by ``module:qualname``: the zygote copies their code and function objects next to
each other before it forks (``hot_code.py``). Written by scripts/hot_code.py; rerun it
when tests/test_hot_code.py says the list no longer covers what workers run. Generated: do
not edit by hand.
"""
'''


# What every forked worker runs before its trace can start (the zygote's side of the fork,
# the trace's own start, a new thread's start-up before its profile hook), by name.
UNTRACEABLE = (
    "__main__:_child",  # the zygote runs as __main__
    "ember.core_worker.memory_trace:start_after_fork",
    "ember.ids:reseed_after_fork",
    "random:Random.seed",
    "threading:Thread._bootstrap",
    "threading:Thread._bootstrap_inner",
)


def capture(settle: float = 2.0) -> set[str]:
    """``module:qualname`` of what an actor's worker and a task's worker ran since the fork."""
    import ember
    from ember.core_worker import memory_trace

    @ember.remote(num_cpus=0)
    class Traced:
        def ping(self) -> int:
            return os.getpid()

        def ran(self) -> list[str]:
            from ember.core_worker import memory_trace

            return memory_trace.hot_functions()

    @ember.remote
    def traced_task() -> list[str]:
        from ember.core_worker import memory_trace

        return memory_trace.hot_functions()

    os.environ[memory_trace.ENV] = "1"
    try:
        ember.init(num_cpus=1, include_dashboard=False)
    finally:
        del os.environ[memory_trace.ENV]
    try:
        actor = Traced.remote()
        ember.get(actor.ping.remote(), timeout=120)
        time.sleep(settle)  # its idle loop's timers run too
        names = set(ember.get(actor.ran.remote(), timeout=60))
        names |= set(ember.get(traced_task.remote(), timeout=120))
    finally:
        ember.shutdown()
    if not names:
        raise SystemExit("no worker traced anything: were they forked by the zygote?")
    return names | set(UNTRACEABLE)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the list, write nothing")
    ap.add_argument(
        "--min-cover", type=float, default=0.85, help="share of what ran the list must name"
    )
    args = ap.parse_args(argv)
    from ember.raylet import hot_code

    ran = capture()
    if not args.check:
        hot_code.write_names(ran, HEADER)
        print(f"wrote {len(ran)} functions to {hot_code.NAMES_FILE}")
        return 0
    listed = hot_code.load()
    covered = len(ran & listed) / len(ran)
    print(f"the list names {covered:.0%} of the {len(ran)} functions traced workers ran")
    if covered < args.min_cover:
        missing = sorted(ran - listed)
        print("not listed:", *missing[:40], sep="\n  ")
        print(f"rerun: {sys.executable} scripts/hot_code.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
