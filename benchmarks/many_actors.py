#!/usr/bin/env python3
"""How many idle actors one node holds: starts N ``num_cpus=0`` actors, calls each once,
and reports the rate they answered at, the private memory (USS) per idle actor, the node
daemons' open files, and, if not all answered, what the raylet said held them back::

    .venv/bin/python benchmarks/many_actors.py 1000 2000
    .venv/bin/python benchmarks/many_actors.py --shared 10000   # shared_process=True actors
    EMBER_MEMORY_USAGE_THRESHOLD=0.8 .venv/bin/python benchmarks/many_actors.py 5000

Sizes run one after the other, each on a fresh node. A size stops waiting when no actor has
answered for ``--stall`` seconds (the node may be holding starts back for memory: then the
raylet's log says so, and this prints that line).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path


def uss_kib(pid: int) -> int:
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Private_"):
                total += int(line.split()[1])
    return total


def mem_available_kib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def children_of(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                out.append(int(name))
    return out


def run(n: int, stall: float, settle: float = 1.0, shared: bool = False) -> dict:
    import ember

    available_before = mem_available_kib()
    ctx = ember.init(num_cpus=2, include_dashboard=False)
    try:

        @ember.remote(num_cpus=0, shared_process=shared)
        class Idle:
            def ping(self) -> int:
                return os.getpid()

        start = time.monotonic()
        actors = [Idle.remote() for _ in range(n)]
        pending = [a.ping.remote() for a in actors]
        answered: list[int] = []
        last_progress = time.monotonic()
        while pending and time.monotonic() - last_progress < stall:
            ready, pending = ember.wait(pending, num_returns=len(pending), timeout=1.0)
            if ready:
                answered += ember.get(ready)
                last_progress = time.monotonic()
        took = last_progress - start
        time.sleep(settle)  # let the last ones settle into idleness
        # What the machine gave the actors: their private pages and the kernel's own for them
        # (page tables, stacks, socket buffers), which USS leaves out: the figure that says
        # how many fit a machine. Other processes' growth meanwhile counts too (noise).
        used_kib = available_before - mem_available_kib()
        hosts = set(answered)
        if len(hosts) < len(answered):
            # Actors share processes: each actor's part of its hosts' private memory.
            per_actor = sum(uss_kib(p) for p in hosts if os.path.exists(f"/proc/{p}"))
            usses = [per_actor / max(len(answered), 1)]
        else:
            sample = answered[:: max(len(answered) // 100, 1)]
            usses = [uss_kib(p) for p in sample if os.path.exists(f"/proc/{p}")]
        daemons = {}
        for pid in children_of(os.getpid()):
            with open(f"/proc/{pid}/cmdline") as f:
                cmd = f.read()
            name = "gcs" if "ember.gcs" in cmd else "raylet" if "ember.raylet" in cmd else None
            if name:
                daemons[name] = len(os.listdir(f"/proc/{pid}/fd"))
        log = (Path(ctx.session_dir) / "logs" / "raylet.log").read_text()
        held = [x for x in log.splitlines() if "Not starting more worker" in x or "open-files" in x]
        return {
            "n": n,
            "answered": len(answered),
            "processes": len(hosts),
            "seconds": took,
            "rate": len(answered) / took if took else 0.0,
            "uss_kib": statistics.median(usses) if usses else 0,
            "used_kib": used_kib / max(len(answered), 1),
            "fds": daemons,
            "held": held[:2],
        }
    finally:
        ember.shutdown()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", type=int, nargs="+", help="numbers of actors, one node each")
    ap.add_argument("--stall", type=float, default=60.0, help="give up after this many idle s")
    ap.add_argument("--settle", type=float, default=1.0, help="s to wait before measuring")
    ap.add_argument(
        "--shared", action="store_true", help="shared_process=True actors, many to a process"
    )
    args = ap.parse_args(argv)
    for n in args.sizes:
        if n < 1:
            ap.error(f"size {n}: give a positive number of actors")
        r = run(n, args.stall, args.settle, args.shared)
        print(
            f"{r['answered']:6}/{r['n']} actors in {r['processes']} processes answered in "
            f"{r['seconds']:6.1f} s "
            f"({r['rate']:5.1f}/s)  USS per idle actor {r['uss_kib'] / 1024:5.2f} MiB  "
            f"machine memory per actor {r['used_kib'] / 1024:5.2f} MiB "
            f"({r['used_kib'] * r['answered'] / 1024**2:5.2f} GiB in all)  "
            f"open files {r['fds']}",
            flush=True,
        )
        for line in r["held"]:
            print("   raylet:", line.split(": ", 1)[-1][:400], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
