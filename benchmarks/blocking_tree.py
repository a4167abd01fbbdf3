#!/usr/bin/env python3
"""A tree of tasks that block on their children, on Ember and on Ray, side by side.

Each task of depth d > 0 submits two tasks of depth d - 1 and waits for both with ``get``, so
every inner task blocks while its subtree runs: the runtime lends the blocked task's CPU to
others (or it would deadlock) and must decide how many worker processes that is worth. The
script prints, for each runtime, the tree's seconds, the peak number of processes the run had
(driver, node daemons and workers) and their unique set size (USS: private pages, the memory
that would be freed if the process ended) summed at its peak, then the ratios::

    .venv/bin/python benchmarks/blocking_tree.py                  # depth 8, both runtimes
    .venv/bin/python benchmarks/blocking_tree.py --depth 10 --only ember
    .venv/bin/python benchmarks/blocking_tree.py --json out.json

Ray's interpreter is ``benchmarks/.ray-venv`` or ``tests/tools/.ray-venv`` (see
``compare_ray.py``), or ``--ray-python``. Each runtime runs in a child process; this process
samples the child's descendants from /proc, so the sampling costs the measured run nothing but
CPU time on a shared machine. Needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from proc_memory import tree_pids as descendants
from proc_memory import uss_bytes

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RAY_PYTHONS = [HERE / ".ray-venv" / "bin" / "python", REPO / "tests/tools/.ray-venv/bin/python"]

# The run itself, executed by the runtime's interpreter: ``rt`` is ``ray`` or ``ember``.
CHILD = r"""
import json, sys, time
rt = __import__(sys.argv[1])
depth, cpus = int(sys.argv[2]), int(sys.argv[3])
kw = {"include_dashboard": False}
if sys.argv[1] == "ray":
    kw["logging_level"] = "ERROR"
rt.init(num_cpus=cpus, **kw)

@rt.remote
def tree(d):
    if d == 0:
        return 1
    return sum(rt.get([tree.remote(d - 1), tree.remote(d - 1)]))

rt.get(tree.remote(0))  # the first worker is up: time the tree, not the node's start
print("START", flush=True)
t0 = time.perf_counter()
leaves = rt.get(tree.remote(depth), timeout=600)
seconds = time.perf_counter() - t0
print("END", flush=True)
assert leaves == 2 ** depth, leaves
print(json.dumps({"seconds": seconds, "leaves": leaves}), flush=True)
rt.shutdown()
"""


class Sampler(threading.Thread):
    """Peak process count and peak summed USS of a process tree, while ``running`` is set."""

    def __init__(self, root: int, period: float) -> None:
        super().__init__(daemon=True)
        self.root, self.period = root, period
        self.running = threading.Event()
        self.stopped = threading.Event()
        self.peak_procs = 0
        self.peak_uss = 0

    def run(self) -> None:
        while not self.stopped.is_set():
            if self.running.is_set():
                pids = descendants(self.root)
                self.peak_procs = max(self.peak_procs, len(pids))
                self.peak_uss = max(self.peak_uss, sum(uss_bytes(p) for p in pids))
            self.stopped.wait(self.period)


def run_one(python: str, runtime: str, depth: int, cpus: int, timeout: float) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [python, "-c", CHILD, runtime, str(depth), str(cpus)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    sampler = Sampler(proc.pid, 0.1)
    sampler.start()
    result: dict = {}
    deadline = time.monotonic() + timeout
    timer = threading.Timer(timeout, proc.kill)  # a hung run ends; its output says so
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if line == "START":
                sampler.running.set()
            elif line == "END":
                sampler.running.clear()
            elif line.startswith("{"):
                result = json.loads(line)
        proc.wait(max(deadline - time.monotonic(), 1.0))
    finally:
        timer.cancel()
        sampler.stopped.set()
        sampler.join()
        stderr = proc.stderr.read() if proc.stderr else ""
        if proc.poll() is None:
            proc.kill()
    if not result:
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        raise SystemExit(f"{runtime}: the run gave no result (exit {proc.returncode}):\n{tail}")
    result.update(peak_procs=sampler.peak_procs, peak_uss_mb=sampler.peak_uss / 2**20)
    return result


def ray_python(given: str | None) -> str:
    if given:
        return given
    for p in RAY_PYTHONS:
        if p.exists():
            return str(p)
    raise SystemExit(
        "no Ray interpreter: run benchmarks/compare_ray.py once (it creates "
        "benchmarks/.ray-venv) or pass --ray-python PATH"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=8, help="tree depth (2**depth leaves)")
    ap.add_argument("--cpus", type=int, default=2, help="num_cpus given to init()")
    ap.add_argument("--only", choices=["ember", "ray"], help="run one runtime")
    ap.add_argument("--ray-python", help="Python interpreter that has Ray installed")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per runtime")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    if args.depth < 0 or args.depth > 16:
        ap.error(f"--depth {args.depth}: give 0..16 (the tree has 2**(depth+1) - 1 tasks)")
    runs: dict[str, dict] = {}
    for runtime in ["ember", "ray"]:
        if args.only and runtime != args.only:
            continue
        python = sys.executable if runtime == "ember" else ray_python(args.ray_python)
        r = run_one(python, runtime, args.depth, args.cpus, args.timeout)
        runs[runtime] = r
        print(
            f"{runtime:6} depth {args.depth}: {r['seconds']:7.2f} s  "
            f"peak processes {r['peak_procs']:4}  peak summed USS {r['peak_uss_mb']:7.1f} MB",
            flush=True,
        )
    if len(runs) == 2:
        e, r = runs["ember"], runs["ray"]
        print(
            f"ratio (Ray / Ember, >1: Ember better): speed {r['seconds'] / e['seconds']:.2f}x  "
            f"processes {r['peak_procs'] / max(e['peak_procs'], 1):.2f}x  "
            f"USS {r['peak_uss_mb'] / max(e['peak_uss_mb'], 1e-9):.2f}x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"depth": args.depth, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
