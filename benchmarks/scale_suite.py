#!/usr/bin/env python3
"""How cost grows with size, on Ray and on Ember side by side: a scale suite after Ray's
release scalability tests (many tasks, actors, objects, placement groups, nodes; large
objects; nested tasks; the state API under load), shrunk to fit one machine.

Every (row, size) runs in a fresh process of each system, Ray's first, then Ember's, one
after the other (``--ray-python``, default ``tests/tools/.ray-venv`` or
``benchmarks/.ray-venv``; Ray is never a dependency of Ember). Each reports its time, its
rate and the peak memory of the whole system: the unique set size (private pages, so shared
libraries and forked pages count once) summed over the driver and every process it started,
sampled in a thread while the row runs. Then a table gives the ratios, and each system's
growth from one size to the next: per-item time at this size over per-item time at the one
before, so 1.0 is linear and 2.0 means each item cost twice as much at the larger size::

    .venv/bin/python benchmarks/scale_suite.py --level quick     # a smoke run (~3 min)
    .venv/bin/python benchmarks/scale_suite.py                   # standard sizes
    .venv/bin/python benchmarks/scale_suite.py --level full --md docs/scale.md
    .venv/bin/python benchmarks/scale_suite.py --rows tasks,actors --only ember

A size that does not finish within ``--row-timeout`` reads TIMEOUT, and that system skips
the row's larger sizes. Only the standard library is imported at the top: Ray's
interpreter runs this same file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MB = 1_000_000

# Memory: the summed unique set size of a process tree (``proc_memory.py``, beside this file)
from proc_memory import tree_pids, uss_bytes  # noqa: E402


class PeakTreeUss:
    """The highest summed USS of this process's tree while the block runs, and the most
    processes it had. The interval grows with the tree: reading 10,000 smaps files takes
    about a second."""

    def __init__(self) -> None:
        self.peak = self.processes = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        pids = tree_pids(os.getpid())
        self.peak = max(self.peak, sum(uss_bytes(p) for p in pids))
        self.processes = max(self.processes, len(pids))

    def _run(self) -> None:
        while not self._done.is_set():
            t0 = time.monotonic()
            self.sample()
            self._done.wait(max(0.25, 4 * (time.monotonic() - t0)))

    def __enter__(self) -> PeakTreeUss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.sample()  # the end state too: a fast row may finish between two samples


# --------------------------------------------------------------------------------------
# The rows: each runs inside Ray's or Ember's interpreter, given the imported module
# --------------------------------------------------------------------------------------

# Each row: (what one item is, the init() options, the workload). A workload gets the
# runtime and the size, runs the timed part between ``clock.start()`` and ``clock.stop()``
# and returns how many items the rate counts (default: the size).


class Clock:
    def __init__(self) -> None:
        self.t0 = self.t1 = 0.0

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def stop(self) -> None:
        self.t1 = time.perf_counter()

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0


def row_tasks(rt: Any, n: int, clock: Clock) -> int:
    @rt.remote
    def noop() -> None:
        return None

    rt.get([noop.remote() for _ in range(10)])
    clock.start()
    refs = [noop.remote() for _ in range(n)]  # all queued before any result is read
    for i in range(0, n, 10_000):
        rt.get(refs[i : i + 10_000], timeout=3600)
    clock.stop()
    return n


def row_actors(rt: Any, n: int, clock: Clock) -> int:
    @rt.remote(num_cpus=0)
    class Idle:
        def ping(self) -> int:
            return os.getpid()

    clock.start()
    actors = [Idle.remote() for _ in range(n)]
    pids = rt.get([a.ping.remote() for a in actors], timeout=3600)
    clock.stop()
    assert len(set(pids)) == n, f"{n} actors answered from {len(set(pids))} processes"
    return n


def row_objects(rt: Any, n: int, clock: Clock) -> int:
    clock.start()
    refs = [rt.put(i) for i in range(n)]
    got = 0
    for i in range(0, n, 10_000):
        got += sum(rt.get(refs[i : i + 10_000], timeout=600))
    clock.stop()
    assert got == n * (n - 1) // 2
    return n


def _array(size_mb: int) -> Any:
    import numpy as np

    a = np.ones(size_mb * MB, dtype=np.uint8)
    return a


def _trials(size_mb: int) -> int:
    return 3 if size_mb >= 1000 else 10 if size_mb >= 100 else 50


def row_large_put(rt: Any, size_mb: int, clock: Clock) -> int:
    a, trials = _array(size_mb), _trials(size_mb)
    rt.get(rt.put(a))
    clock.start()
    for _ in range(trials):
        ref = rt.put(a)
        del ref
    clock.stop()
    return size_mb * trials


def row_large_get(rt: Any, size_mb: int, clock: Clock) -> int:
    # A zero-copy get costs the same at every size: 200 of them, or the clock's resolution
    # and one slow call would decide the 1 GB row.
    ref, trials = rt.put(_array(size_mb)), 200
    rt.get(ref)
    clock.start()
    for _ in range(trials):
        v = rt.get(ref)
        assert v.nbytes == size_mb * MB
        del v
    clock.stop()
    return size_mb * trials


def row_large_arg(rt: Any, size_mb: int, clock: Clock) -> int:
    @rt.remote
    def nbytes(a: Any) -> int:
        return int(a.nbytes)

    a, trials = _array(size_mb), _trials(size_mb)
    rt.get(nbytes.remote(a))
    clock.start()
    for _ in range(trials):
        assert rt.get(nbytes.remote(a), timeout=600) == size_mb * MB
    clock.stop()
    return size_mb * trials


def row_placement_groups(rt: Any, n: int, clock: Clock) -> int:
    if rt.__name__ == "ray":
        from ray.util.placement_group import placement_group, remove_placement_group
    else:
        from ember.util.placement_group import placement_group, remove_placement_group

    clock.start()
    pgs = [placement_group([{"custom": 1}]) for _ in range(n)]
    rt.get([pg.ready() for pg in pgs], timeout=3600)
    for pg in pgs:
        remove_placement_group(pg)
    clock.stop()
    return n


def row_nested_blocking(rt: Any, depth: int, clock: Clock) -> int:
    @rt.remote
    def tree(d: int) -> int:
        if d == 0:
            return 1
        return sum(rt.get([tree.remote(d - 1), tree.remote(d - 1)]))

    clock.start()
    leaves = rt.get(tree.remote(depth), timeout=3600)
    clock.stop()
    assert leaves == 2**depth
    return 2 ** (depth + 1) - 1


def row_nested_refs(rt: Any, depth: int, clock: Clock) -> int:
    @rt.remote
    def tree(d: int) -> Any:
        if d == 0:
            return 1
        return [tree.remote(d - 1), tree.remote(d - 1)]  # children as refs: nothing blocks

    clock.start()
    level, leaves = [tree.remote(depth)], 0
    while level:
        nxt = []
        for value in rt.get(level, timeout=3600):
            if isinstance(value, list):
                nxt.extend(value)
            else:
                leaves += value
        level = nxt
    clock.stop()
    assert leaves == 2**depth
    return 2 ** (depth + 1) - 1


def row_nodes(rt: Any, n: int, clock: Clock) -> int:
    """``n`` nodes of one CPU join a head on this machine (each its own raylet), then a
    SPREAD batch of tasks reaches every node."""
    if rt.__name__ == "ray":
        from ray.cluster_utils import Cluster
    else:
        from ember.cluster_utils import Cluster
    store = 80 * 1024 * 1024
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": store}
    )
    try:
        clock.start()
        for _ in range(n):
            cluster.add_node(num_cpus=1, object_store_memory=store)
        if rt.__name__ == "ray":
            cluster.wait_for_nodes(timeout=3600)
            rt.init(address=cluster.address, log_to_driver=False)
        else:
            cluster.connect(log_to_driver=False)

        @rt.remote(num_cpus=1, scheduling_strategy="SPREAD")
        def where() -> str:
            time.sleep(0.05)
            return rt.get_runtime_context().get_node_id()

        seen: set[str] = set()
        deadline = time.monotonic() + 3600
        while len(seen) < n + 1 and time.monotonic() < deadline:
            seen.update(rt.get([where.remote() for _ in range(2 * (n + 1))], timeout=3600))
        clock.stop()
        assert len(seen) == n + 1, f"tasks reached {len(seen)} of {n + 1} nodes"
    finally:
        rt.shutdown()
        cluster.shutdown()
    return n


class _State:
    """The runtime's state API, addressed to this driver's cluster (Ray's finds "multiple
    active Ray instances" on a machine running others, and refuses to guess)."""

    def __init__(self, rt: Any) -> None:
        if rt.__name__ == "ray":
            import ray.util.state as state

            self.kw = {"address": rt.get_runtime_context().gcs_address}
        else:
            import ember.util.state as state

            self.kw = {}
        self.state = state

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.state, name)
        return lambda *a, **kw: fn(*a, **self.kw, **kw)


def _state(rt: Any) -> Any:
    return _State(rt)


def row_state_tasks(rt: Any, n: int, clock: Clock) -> int:
    """``n`` finished tasks, then the state API lists the last 1,000 of them and summarises
    them all; the time is the queries' (the rate: queries per second)."""
    row_tasks(rt, n, Clock())
    state = _state(rt)
    want = min(n, 1000)
    deadline = time.monotonic() + 300  # task events reach the state API a moment later
    while len(state.list_tasks(limit=want, raise_on_missing_output=False)) < want:
        if time.monotonic() > deadline:
            raise TimeoutError("the finished tasks never reached the state API")
        time.sleep(1)
    clock.start()
    for _ in range(5):
        assert len(state.list_tasks(limit=want, raise_on_missing_output=False)) == want
        state.summarize_tasks(raise_on_missing_output=False)
    clock.stop()
    return 10


def row_state_actors(rt: Any, n: int, clock: Clock) -> int:
    """``n`` live actors, then the state API lists them all, five times."""
    row_actors(rt, n, Clock())
    state = _state(rt)
    clock.start()
    for _ in range(5):
        got = state.list_actors(limit=n, raise_on_missing_output=False)
        assert len(got) >= n, f"list_actors gave {len(got)} of {n}"
    clock.stop()
    return 5


GIB = 1024**3
PLAIN = {"num_cpus": 2}
ROWS: dict[str, tuple[str, dict[str, Any], Callable[[Any, int, Clock], int]]] = {
    "tasks": ("tasks", PLAIN, row_tasks),
    "actors": ("actors", PLAIN, row_actors),
    "objects": ("objects", PLAIN, row_objects),
    "large put": ("MB", {**PLAIN, "object_store_memory": 3 * GIB}, row_large_put),
    "large get": ("MB", {**PLAIN, "object_store_memory": 3 * GIB}, row_large_get),
    "large task arg": ("MB", {**PLAIN, "object_store_memory": 3 * GIB}, row_large_arg),
    "placement groups": ("groups", {**PLAIN, "resources": {"custom": 10**6}}, row_placement_groups),
    "nested tasks (blocking get)": ("tasks", PLAIN, row_nested_blocking),
    "nested tasks (refs returned)": ("tasks", PLAIN, row_nested_refs),
    "nodes": ("nodes", {}, row_nodes),
    "state API at N finished tasks": ("queries", {**PLAIN, "dashboard": True}, row_state_tasks),
    "state API at N live actors": ("queries", {**PLAIN, "dashboard": True}, row_state_actors),
}
SIZE_NAMES = {"large put": "MB", "large get": "MB", "large task arg": "MB"}
LEVELS: dict[str, dict[str, list[int]]] = {
    "quick": {
        "tasks": [1000, 10_000],
        "actors": [20, 100],
        "objects": [10_000, 100_000],
        "large put": [1, 100],
        "large get": [1, 100],
        "large task arg": [1, 100],
        "placement groups": [100, 1000],
        "nested tasks (blocking get)": [5, 6],
        "nested tasks (refs returned)": [8, 10],
        "nodes": [2, 4],
        "state API at N finished tasks": [10_000],
        "state API at N live actors": [100],
    },
    "standard": {
        "tasks": [1000, 10_000, 100_000],
        "actors": [100, 1000],
        "objects": [10_000, 100_000],
        "large put": [1, 10, 100, 1000],
        "large get": [1, 10, 100, 1000],
        "large task arg": [1, 10, 100, 1000],
        "placement groups": [100, 1000],
        "nested tasks (blocking get)": [6, 8],
        "nested tasks (refs returned)": [8, 11, 14],
        "nodes": [10, 30],
        "state API at N finished tasks": [100_000],
        "state API at N live actors": [1000],
    },
}
LEVELS["full"] = {
    **LEVELS["standard"],
    "tasks": [1000, 10_000, 100_000, 1_000_000],
    "actors": [100, 1000, 10_000],
    "objects": [10_000, 100_000, 1_000_000],
    "placement groups": [100, 1000, 10_000],
    "nested tasks (blocking get)": [6, 8, 10],
    "nodes": [10, 30, 100],
    "state API at N live actors": [1000, 10_000],
}


def _init(rt: Any, options: dict[str, Any]) -> None:
    options = dict(options)
    dashboard = options.pop("dashboard", False)
    rt.init(**options, include_dashboard=dashboard, log_to_driver=False)


def run_one(system: str, row: str, size: int) -> dict[str, Any]:
    """One row at one size, in this process (a fresh one per size)."""
    rt = __import__(system)
    unit, options, workload = ROWS[row]
    clock = Clock()
    with PeakTreeUss() as mem:
        if row != "nodes":
            _init(rt, options)
        try:
            items = workload(rt, size, clock)
            mem.sample()  # everything the row made is alive now
        finally:
            if row != "nodes":
                rt.shutdown()
    return {
        "seconds": clock.seconds,
        "items": items,
        "rate": items / clock.seconds if clock.seconds else None,
        "unit": f"{unit}/s",
        "peak_uss": mem.peak,
        "peak_processes": mem.processes,
        "version": getattr(rt, "__version__", "?"),
    }


# --------------------------------------------------------------------------------------
# The driver of the comparison: runs in Ember's interpreter
# --------------------------------------------------------------------------------------


def _default_ray_python() -> str:
    """``EMBER_RAY_PYTHON``; else the tests' Ray environment (``scripts/dev.sh setup`` makes
    it with Ray's dashboard, which the state-API rows need, and numpy); else
    ``benchmarks/.ray-venv``, made on first use as ``compare_ray.py`` makes it (Ray without
    its dashboard: the state-API rows fail there, saying so)."""
    if os.environ.get("EMBER_RAY_PYTHON"):
        return os.environ["EMBER_RAY_PYTHON"]
    tests_ray = REPO / "tests" / "tools" / ".ray-venv" / "bin" / "python"
    if tests_ray.exists():
        return str(tests_ray)
    sys.path.insert(0, str(HERE))
    import compare_ray

    return str(compare_ray.ensure_ray_venv())


def _run_sub(python: str, system: str, row: str, size: int, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [python, str(Path(__file__).resolve()), "--half", system]
        cmd += ["--row", row, "--size", str(size), "--json", out]
        env = dict(os.environ)
        if system == "ray":
            env.pop("PYTHONPATH", None)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        # Its own session: a timeout ends the whole tree, nodes and workers included.
        with open(os.path.join(tmp, "stderr.log"), "w") as err:
            proc = subprocess.Popen(
                cmd, env=env, cwd=tmp, start_new_session=True, stdout=err, stderr=err
            )
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _end_group(proc)
                return {"error": f"TIMEOUT after {timeout:.0f} s"}
            _end_group(proc)
        if code != 0 or not os.path.exists(out):
            with open(os.path.join(tmp, "stderr.log")) as f:
                tail = f.read()[-600:].strip().splitlines()
            return {"error": f"FAILED (exit {code}): {tail[-1] if tail else ''}"}
        with open(out) as f:
            return json.load(f)


def _end_group(proc: subprocess.Popen) -> None:
    """Ends what the half left in its session (a runtime's node processes)."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def _growth(prev: dict[str, Any] | None, cur: dict[str, Any]) -> float | None:
    if not prev or "seconds" not in prev or "seconds" not in cur:
        return None
    per_prev, per_cur = prev["seconds"] / prev["items"], cur["seconds"] / cur["items"]
    return per_cur / per_prev if per_prev else None


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| row | size | Ray rate | Ember rate | Ember/Ray | Ray peak USS | Ember peak USS "
        "| Ray/Ember memory | growth Ray | growth Ember |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in results:
        ray, ember = r["ray"], r["ember"]
        ratio = ember["rate"] / ray["rate"] if ray.get("rate") and ember.get("rate") else None
        mem = (
            ray["peak_uss"] / ember["peak_uss"]
            if ray.get("peak_uss") and ember.get("peak_uss")
            else None
        )
        unit = (ember.get("unit") or ray.get("unit") or "").strip()

        def rate(h: dict[str, Any], unit: str = unit) -> str:
            return h["error"] if "error" in h else f"{h['rate']:,.1f} {unit}"

        def uss(h: dict[str, Any]) -> str:
            if "peak_uss" not in h:
                return "-"
            return f"{h['peak_uss'] / 2**20:,.0f} MiB ({h['peak_processes']} procs)"

        size = f"{r['size']:,}" + (" MB" if r["row"] in SIZE_NAMES else "")
        lines.append(
            f"| {r['row']} | {size} | {rate(ray)} | {rate(ember)} | {_fmt(ratio, '.2f')}x "
            f"| {uss(ray)} | {uss(ember)} | {_fmt(mem, '.2f')}x "
            f"| {_fmt(r.get('growth_ray'), '.2f')} | {_fmt(r.get('growth_ember'), '.2f')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--half", choices=["ray", "ember"], help=argparse.SUPPRESS)
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--md", default=None, help="write the table (markdown) here")
    parser.add_argument("--level", choices=sorted(LEVELS), default="standard")
    parser.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    parser.add_argument("--only", choices=["ray", "ember"], default=None)
    parser.add_argument("--row-timeout", type=float, default=900.0, help="seconds per size")
    parser.add_argument("--ray-python", default=None, help="the interpreter that has Ray")
    args = parser.parse_args(argv)
    if args.half:
        result = run_one(args.half, args.row, args.size)
        with open(args.json, "w") as f:
            json.dump(result, f)
        return 0
    wanted = [r.strip() for r in args.rows.split(",") if r.strip()] or list(LEVELS[args.level])
    unknown = [r for r in wanted if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; the rows are {list(ROWS)}")
    systems = [args.only] if args.only else ["ray", "ember"]
    pythons = {"ember": sys.executable}
    if "ray" in systems:
        pythons["ray"] = args.ray_python or _default_ray_python()
    results: list[dict[str, Any]] = []
    for row in wanted:
        prev: dict[str, dict[str, Any]] = {}
        failed: set[str] = set()
        for size in LEVELS[args.level][row]:
            entry: dict[str, Any] = {"row": row, "size": size}
            for system in ("ray", "ember"):
                if system not in systems:
                    entry[system] = {"error": "not run"}
                    continue
                if system in failed:
                    entry[system] = {"error": "skipped (a smaller size did not finish)"}
                    continue
                got = _run_sub(pythons[system], system, row, size, args.row_timeout)
                entry[system] = got
                if "error" in got:
                    failed.add(system)
                entry[f"growth_{system}"] = _growth(prev.get(system), got)
                prev[system] = got
                print(f"{row} {size} {system}: {got}", flush=True)
            results.append(entry)
    text = table(results)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.md:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        cpus = os.cpu_count()
        with open("/proc/meminfo") as f:
            mem_gib = int(f.readline().split()[1]) / 2**20
        Path(args.md).write_text(
            f"# Scale suite: Ember against Ray\n\n"
            f"`{' '.join(['benchmarks/scale_suite.py', *(argv or sys.argv[1:])])}`, "
            f"{stamp}, on {platform.node()}: {cpus} CPUs, {mem_gib:.0f} GiB, "
            f"{platform.platform()}.\n\n"
            "Rates are items per second (higher is better); peak USS is the summed unique set "
            "size of the driver and every process it started; growth is the per-item time at "
            "a size over that at the size before it (1.0: linear).\n\n" + text + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
