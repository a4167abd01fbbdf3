#!/usr/bin/env python3
"""An idle actor's own memory, and what it is made of::

    .venv/bin/python benchmarks/actor_memory.py [--actors 200] [--settle 3] [--json F]

Starts N idle one-process actors (``num_cpus=0``) on one node, calls each once, lets them
settle, and reports per actor the unique set size (USS: the pages only it maps, what ending
it frees; psutil's ``memory_full_info().uss``), the proportional set size (PSS) and the
resident set size (RSS): median, smallest and largest. Then, for the actor with the median
USS: its ``smaps_rollup``; its private memory by mapping (glibc's heap, anonymous memory
where pymalloc's arenas live, each thread's stack, each thread's malloc arena, libraries'
data), each split into copies of a page the zygote has at that address (copy-on-write:
a reference count written, a free slot reused) and pages it allocated anew; and its threads.
Last, on a second node started with ``EMBER_WORKER_MEMORY_TRACE`` (``memory_trace.py``), a
few actors report the modules they imported after the fork, their Python allocations since
it (tracemalloc), the largest first, and the Python functions they ran (each run writes its
code object's reference count: the pages those lie on are copies). Needs root for the copy/new split (page frame
numbers of another process); it runs without, reporting 0 for both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proc_memory import (  # noqa: E402
    Mapping,
    mappings,
    private_origin_kib,
    rollup_kib,
    thread_stack_pointers,
)

TRACE_FRAMES = 12
# Why each of a worker's threads exists, by the name Ember gives it.
PURPOSES = {
    "MainThread": "runs tasks and the actor's calls, in order (executor.run)",
    "ember-io": "the I/O event loop: every connection, replies, timers",
    "ember-fut": "object futures (object_access._FUTURE_POOL)",
    "ember-pull": "pulls for wait(fetch_local=True)",
    "ember-actor": "a threaded actor's calls (max_concurrency > 1)",
}


def purpose(name: str) -> str:
    if not name:
        return "started by a C library, not by Python"
    for prefix, why in PURPOSES.items():
        if name == prefix or name.startswith(prefix + "_"):
            return why
    return "started by user code or a library"


def classify(ms: list[Mapping], stacks: dict[int, str]) -> list[tuple[str, Mapping]]:
    """Each mapping with the kind of memory it holds. ``stacks`` is {stack pointer: thread}."""
    out = []
    for i, m in enumerate(ms):
        owner = next((t for sp, t in stacks.items() if m.start <= sp < m.end), None)
        if m.name == "[heap]":
            kind = "[heap]: glibc malloc's main arena (objects > 512 B, buffers)"
        elif m.name == "[stack]" or owner == "MainThread":
            kind = "stack: MainThread"
        elif owner is not None:
            kind = f"stack: {owner}"
        elif m.name.startswith("/dev/shm") or "plasma" in m.name or "arena" in m.name:
            kind = "object store arena (shared file)"
        elif m.name.startswith("/"):
            lib = os.path.basename(m.name)
            kind = f"file: {lib} ({'code' if 'x' in m.perms else 'data'})"
        elif m.name:
            kind = f"other: {m.name}"
        elif (
            m.start % (64 << 20) == 0
            and i + 1 < len(ms)
            and ms[i + 1].start == m.end
            and ms[i + 1].perms.startswith("---")
        ):
            # glibc's per-thread arenas are 64 MiB-aligned heaps, the unused tail inaccessible
            kind = "anon: a thread's malloc arena"
        elif m.perms.startswith("---"):
            kind = "anon: guard pages"
        else:
            kind = "anon: pymalloc arenas, large malloc blocks, libraries' buffers"
        out.append((kind, m))
    return out


def breakdown(pid: int, parent: int, names: dict[int, str]) -> list[dict[str, Any]]:
    """Private memory of ``pid`` by kind of mapping, largest first."""
    sps = thread_stack_pointers(pid)
    stacks = {sp: names.get(tid, f"thread {tid}") for tid, sp in sps.items()}
    rows: dict[str, dict[str, Any]] = {}
    for kind, m in classify(mappings(pid), stacks):
        r = rows.setdefault(
            kind, {"kind": kind, "maps": 0, "rss": 0, "pss": 0, "uss": 0, "copied": 0, "new": 0}
        )
        r["maps"] += 1
        r["rss"] += m.kib.get("Rss", 0)
        r["pss"] += m.kib.get("Pss", 0)
        r["uss"] += m.private_kib
        if m.private_kib and parent:
            copied, new = private_origin_kib(pid, parent, m)
            r["copied"] += copied
            r["new"] += new
    return sorted((r for r in rows.values() if r["rss"]), key=lambda r: -r["uss"])


def zygote_of(pid: int) -> int:
    """The fork server that made ``pid``, or 0 (an exec'd worker)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
    try:
        with open(f"/proc/{ppid}/cmdline") as f:
            return ppid if "ember.raylet.zygote" in f.read() else 0
    except OSError:
        return 0


def _idle_actors(ember: Any, n: int, deadline: float) -> tuple[list[Any], list[int]]:
    @ember.remote(num_cpus=0)
    class Idle:
        def ping(self) -> int:
            return os.getpid()

        def report(self) -> dict:
            try:
                from ember.core_worker import memory_trace
            except ImportError:  # an Ember from before the tool: its USS figures only
                return {"threads": [], "modules": None, "allocations": None}
            return memory_trace.report()

    actors = [Idle.remote() for _ in range(n)]
    pids = ember.get([a.ping.remote() for a in actors], timeout=deadline)
    return actors, pids


def measure(n: int, settle: float, deadline: float) -> dict[str, Any]:
    import ember

    ember.init(num_cpus=2, include_dashboard=False)
    try:
        start = time.monotonic()
        actors, pids = _idle_actors(ember, n, deadline)
        took = time.monotonic() - start
        time.sleep(settle)
        rolls = {pid: rollup_kib(pid) for pid in pids}
        usses = sorted((r["USS"], pid) for pid, r in rolls.items() if r)
        median_pid = usses[len(usses) // 2][1]

        def stat(field: str) -> dict[str, float]:
            vals = [r[field] for r in rolls.values() if r]
            return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}

        parent = zygote_of(median_pid)
        # The actor's own account of its threads allocates a little: the USS figures above
        # are from before it; the breakdown below (which needs the names) from after.
        actor = actors[pids.index(median_pid)]
        rep = ember.get(actor.report.remote(), timeout=deadline)
        names = {t["tid"]: t["name"] or f"native {t['tid']}" for t in rep["threads"]}
        return {
            "actors": n,
            "seconds": took,
            "uss_kib": stat("USS"),
            "pss_kib": stat("Pss"),
            "rss_kib": stat("Rss"),
            "one": {"pid": median_pid, "forked": bool(parent), "rollup": rolls[median_pid]},
            "mappings": breakdown(median_pid, parent, names),
            "threads": [{**t, "purpose": purpose(t["name"])} for t in rep["threads"]],
        }
    finally:
        ember.shutdown()


def trace(n: int, deadline: float) -> dict[str, Any]:
    """Modules and allocations since the fork, from ``n`` actors on a node that traces."""
    import ember
    from ember.core_worker import memory_trace

    os.environ[memory_trace.ENV] = str(TRACE_FRAMES)
    try:
        ember.init(num_cpus=2, include_dashboard=False)
    finally:
        del os.environ[memory_trace.ENV]
    try:
        actors, _ = _idle_actors(ember, n, deadline)
        reps = ember.get([a.report.remote() for a in actors], timeout=deadline)
        traced = [r for r in reps if r["allocations"] is not None]
        if not traced:
            return {"error": "no actor traced: were the workers forked by the zygote?"}
        totals = sorted(r["allocations"]["bytes"] for r in traced)
        mid = next(r for r in traced if r["allocations"]["bytes"] == totals[len(totals) // 2])
        return {
            "actors": n,
            "modules": mid["modules"],
            "allocations": mid["allocations"],
            "called": mid.get("called"),
        }
    finally:
        ember.shutdown()


def mib(kib: float) -> str:
    return f"{kib / 1024:.2f}"


def print_report(m: dict[str, Any], t: dict[str, Any]) -> None:
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, {time.ctime()}")
    print(f"{m['actors']} idle actors answered in {m['seconds']:.1f} s\n")
    print("| per actor | median MiB | min | max |\n| --- | --- | --- | --- |")
    for key, label in (("uss_kib", "USS"), ("pss_kib", "PSS"), ("rss_kib", "RSS")):
        s = m[key]
        print(f"| {label} | {mib(s['median'])} | {mib(s['min'])} | {mib(s['max'])} |")
    one = m["one"]
    print(f"\nThe median actor (pid {one['pid']}, forked by the zygote: {one['forked']}):")
    roll = one["rollup"]
    print("  smaps_rollup: " + ", ".join(f"{k} {v} kB" for k, v in roll.items() if v))
    print(
        "\n| mapping kind | maps | RSS KiB | PSS KiB | USS KiB | copied from zygote | new |"
        "\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    for r in m["mappings"]:
        print(
            f"| {r['kind']} | {r['maps']} | {r['rss']} | {r['pss']} | {r['uss']} | "
            f"{r['copied']} | {r['new']} |"
        )
    print("\n| thread id | name | purpose |\n| --- | --- | --- |")
    for th in m["threads"]:
        print(f"| {th['tid']} | {th['name'] or '-'} | {th['purpose']} |")
    if "error" in t:
        print("\ntrace:", t["error"])
        return
    mods = t["modules"] or []
    print(f"\nModules imported after the fork ({len(mods)}): {', '.join(mods) or 'none'}")
    a = t["allocations"]
    print(
        f"\nPython allocations since the fork still held (tracemalloc, {a['count']} blocks,"
        f" {a['bytes'] / 1024:.0f} KiB):\n\n| where | KiB | blocks |\n| --- | --- | --- |"
    )
    for s in a["top"]:
        print(f"| {s['where']} | {s['bytes'] / 1024:.1f} | {s['count']} |")
    print("\n| file | KiB | blocks |\n| --- | --- | --- |")
    for s in a["by_file"]:
        print(f"| {s['where']} | {s['bytes'] / 1024:.1f} | {s['count']} |")
    c = t.get("called")
    if c:
        # Each function run writes its code object's reference count (a copied page each).
        print(
            f"\nPython functions run since the fork: {c['functions']}, their code on"
            f" {c['pages']} distinct pages\n\n| file | functions | pages |\n| --- | --- | --- |"
        )
        for r in c["top"]:
            print(f"| {r['file']} | {r['functions']} | {r['pages']} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--actors", type=int, default=200, help="idle actors to measure")
    ap.add_argument("--settle", type=float, default=3.0, help="s idle before measuring")
    ap.add_argument("--trace-actors", type=int, default=3, help="actors on the tracing node")
    ap.add_argument("--deadline", type=float, default=300.0, help="s to wait for the actors")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    if args.actors < 1 or args.trace_actors < 0:
        ap.error("--actors must be at least 1 and --trace-actors at least 0")
    m = measure(args.actors, args.settle, args.deadline)
    t = trace(args.trace_actors, args.deadline) if args.trace_actors else {"error": "skipped"}
    print_report(m, t)
    if args.json:
        Path(args.json).write_text(json.dumps({"idle": m, "trace": t}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
