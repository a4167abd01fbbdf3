"""Why `1:1 actor calls sync` moves between runs: its rate in short windows, one after another.

A synchronous actor call is a chain of four thread wake-ups (driver -> actor's I/O thread ->
actor's executing thread -> driver's I/O thread -> driver), each nearly free of work, so the
rate is set by how fast the machine wakes a sleeping thread on another CPU. On a virtual
machine that cost changes over minutes with the host's load; this script shows it as a
series of window rates, optionally beside the same loop with every process pinned to one CPU
(``--pinned``: the wake-ups then never cross CPUs, which bounds what the CPU work alone
allows).

    .venv/bin/python benchmarks/actor_sync_windows.py [--windows 16] [--calls 500] [--pinned]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def measure(windows: int, calls: int, include_dashboard: bool) -> list[float]:
    import ember

    ember.init(num_cpus=2, include_dashboard=include_dashboard)
    try:

        @ember.remote
        class Actor:
            def small_value(self) -> bytes:
                return b"ok"

        actor = Actor.remote()
        ember.get(actor.small_value.remote(), timeout=60)
        rates = []
        for _ in range(windows):
            start = time.perf_counter()
            for _ in range(calls):
                ember.get(actor.small_value.remote(), timeout=60)
            rates.append(calls / (time.perf_counter() - start))
        return rates
    finally:
        ember.shutdown()


def report(label: str, rates: list[float]) -> None:
    shown = " ".join(f"{r:,.0f}" for r in rates)
    print(f"{label}: median {statistics.median(rates):,.0f}/s  windows: {shown}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=16, help="windows per run (default 16)")
    parser.add_argument("--calls", type=int, default=500, help="calls per window (default 500)")
    parser.add_argument(
        "--pinned", action="store_true", help="also run with every process pinned to CPU 0"
    )
    parser.add_argument("--no-dashboard", action="store_true", help="init(include_dashboard=False)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.windows < 1 or args.calls < 1:
        parser.error("--windows and --calls must be at least 1")
    if args.child:
        report("pinned to CPU 0", measure(args.windows, args.calls, not args.no_dashboard))
        return 0
    report("free", measure(args.windows, args.calls, not args.no_dashboard))
    if args.pinned:
        # A fresh process: the node's processes inherit the affinity set before they start.
        child = [sys.executable, os.path.abspath(__file__), "--child"]
        child += ["--windows", str(args.windows), "--calls", str(args.calls)]
        if args.no_dashboard:
            child.append("--no-dashboard")
        subprocess.run(
            child, check=True, timeout=600, preexec_fn=lambda: os.sched_setaffinity(0, {0})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
