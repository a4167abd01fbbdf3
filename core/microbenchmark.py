"""The workloads of ``ray microbenchmark``, runnable against any runtime with Ray's API.

The same code measures Ray and Ember: every workload is written against a runtime module
passed in (``rt`` is the imported ``ray`` or ``ember``), so the numbers compare like with
like. The definitions follow Ray's ``python/ray/_private/ray_perf.py`` (Ray 2.60): the same
remote functions and actor classes, batch sizes, multipliers and timing loop
(``ray_microbenchmark_helpers.timeit``), and the same output line per row::

    <name> per second <mean> +- <std>

Two rows are Ember's own targets and are measured in fresh processes:
``init -> first task -> shutdown`` (seconds; best and mean of 3) and
``idle local node resident memory`` (MB summed over the driver and every process of the
node, once it has gone idle).

This module imports nothing from Ember, so it can be loaded by file path in an environment
that only has Ray (``benchmarks/compare_ray.py`` does that). Run it with::

    python -m ember.microbenchmark [--filter SUBSTRING] [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import importlib
import json
import multiprocessing
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from types import ModuleType, SimpleNamespace
from typing import Any

STARTUP_ROW = "init -> first task -> shutdown"
MEMORY_ROW = "idle local node resident memory"

# Environment variable that marks every process started on behalf of one memory probe.
PROBE_MARK_ENV = "EMBER_MICROBENCHMARK_PROBE"
_PROBE_PREFIX = "@@probe-result@@ "
# Loads this file by path (no directory of it lands on sys.path) and runs a probe.
_PROBE_LAUNCHER = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('_microbenchmark_probe', sys.argv[1])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = mod\n"
    "spec.loader.exec_module(mod)\n"
    "sys.exit(mod.probe_main(sys.argv[2:]))\n"
)
MIB = 1024 * 1024


# --------------------------------------------------------------------------------------
# Results and timing
# --------------------------------------------------------------------------------------


@dataclass
class Result:
    """One row. ``value`` is the mean rate for ``per second`` rows, the best time for the
    ``seconds`` row and the total resident memory for the ``MB`` row."""

    name: str
    unit: str
    value: float | None = None
    std: float | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Timing:
    """Ray's timeit: sleep (``settle``), warm up for ``warmup`` seconds, then ``trials``
    trials of ``duration`` seconds each, calling in steps of a tenth of the warm-up count."""

    settle: float = 10.0
    warmup: float = 1.0
    trials: int = 4
    duration: float = 2.0


RAY_TIMING = Timing()
QUICK_TIMING = Timing(settle=0.0, warmup=0.2, trials=2, duration=0.5)


def timeit(
    name: str, fn: Callable[[], object], multiplier: float = 1, timing: Timing = RAY_TIMING
) -> Result:
    """Measure ``fn`` the way Ray's ``timeit`` does and print Ray's line for it."""
    # Ray sleeps before every row "to avoid noisy neighbours"; it also lets actors that
    # the row just created finish starting.
    time.sleep(timing.settle)
    start = time.perf_counter()
    count = 0
    while True:
        fn()
        count += 1
        if time.perf_counter() - start >= timing.warmup:
            break
    step = count // 10 + 1
    stats: list[float] = []
    for _ in range(timing.trials):
        start = time.perf_counter()
        count = 0
        while time.perf_counter() - start < timing.duration:
            for _ in range(step):
                fn()
            count += step
        end = time.perf_counter()
        stats.append(multiplier * count / (end - start))
    mean = statistics.fmean(stats)
    sd = statistics.pstdev(stats)  # np.std: the population deviation
    print(name, "per second", round(mean, 2), "+-", round(sd, 2), flush=True)
    return Result(
        name,
        "per second",
        mean,
        sd,
        extra={"trials": stats, "step": step, "multiplier": multiplier},
    )


class RowTimeout(Exception):
    """A workload produced no result within its deadline."""


@contextlib.contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Raise RowTimeout in the main thread after ``seconds`` (no-op elsewhere)."""
    if (
        not seconds
        or threading.current_thread() is not threading.main_thread()
        or not hasattr(signal, "setitimer")
    ):
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise RowTimeout(f"no result within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------------------
# Remote functions and actor classes (ray_perf.py's module level, bound to ``rt``)
# --------------------------------------------------------------------------------------


def define(rt: ModuleType) -> SimpleNamespace:
    """Ray's benchmark functions and classes, decorated with ``rt.remote``.

    They are defined inside this function so that cloudpickle ships them by value: the
    workers need neither this module nor any path to it.
    """

    @rt.remote
    def small_value() -> bytes:
        return b"ok"

    @rt.remote
    def small_value_batch(n: int) -> int:
        submitted = [small_value.remote() for _ in range(n)]
        rt.get(submitted)
        return 0

    @rt.remote
    def create_object_containing_ref() -> list:
        obj_refs = []
        for _ in range(10000):
            obj_refs.append(rt.put(1))
        return obj_refs

    @rt.remote
    def do_put_small() -> None:
        for _ in range(100):
            rt.put(0)

    @rt.remote
    def do_put() -> None:
        import numpy as np

        for _ in range(10):
            rt.put(np.zeros(10 * 1024 * 1024, dtype=np.int64))

    @rt.remote(num_cpus=0)
    class Actor:
        def small_value(self) -> bytes:
            return b"ok"

        def small_value_arg(self, x: object) -> bytes:
            return b"ok"

        def small_value_batch(self, n: int) -> None:
            rt.get([small_value.remote() for _ in range(n)])

    @rt.remote
    class AsyncActor:
        async def small_value(self) -> bytes:
            return b"ok"

        async def small_value_with_arg(self, x: object) -> bytes:
            return b"ok"

        async def small_value_batch(self, n: int) -> None:
            await asyncio.wait([small_value.remote() for _ in range(n)])

    @rt.remote(num_cpus=0)
    class Client:
        def __init__(self, servers: object) -> None:
            if not isinstance(servers, list):
                servers = [servers]
            self.servers = servers

        def small_value_batch(self, n: int) -> None:
            results = []
            for s in self.servers:
                results.extend([s.small_value.remote() for _ in range(n)])
            rt.get(results)

        def small_value_batch_arg(self, n: int) -> None:
            x = rt.put(0)
            results = []
            for s in self.servers:
                results.extend([s.small_value_arg.remote(x) for _ in range(n)])
            rt.get(results)

    def make_work(n_cpu: int, n: int) -> Any:
        # ray_perf.py defines this task (twice: `work`, `async_actor_work`) inside main().
        @rt.remote
        def work(actors: list) -> None:
            rt.get([actors[i % n_cpu].small_value.remote() for i in range(n)])

        return work

    return SimpleNamespace(
        small_value=small_value,
        small_value_batch=small_value_batch,
        create_object_containing_ref=create_object_containing_ref,
        do_put_small=do_put_small,
        do_put=do_put,
        Actor=Actor,
        AsyncActor=AsyncActor,
        Client=Client,
        make_work=make_work,
    )


# --------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------

Bench = tuple[Callable[[], object], float]


@dataclass
class Context:
    rt: ModuleType
    d: SimpleNamespace
    # multiprocessing.cpu_count() // 2, as in ray_perf.py: 1 on a 2-core machine.
    n_cpu: int


@dataclass(frozen=True)
class Workload:
    name: str
    setup: Callable[[Context], Bench] | None
    # "default": inside rt.init(); "pg": inside rt.init(resources={"custom": 100});
    # "probe": in fresh processes.
    session: str = "default"
    # Rows of `ray microbenchmark` outside Ember's comparison set: run with extra=True.
    extra: bool = False


WORKLOADS: list[Workload] = []


def _workload(
    name: str, *, session: str = "default", extra: bool = False
) -> Callable[[Callable[[Context], Bench]], Callable[[Context], Bench]]:
    def register(setup: Callable[[Context], Bench]) -> Callable[[Context], Bench]:
        WORKLOADS.append(Workload(name, setup, session, extra))
        return setup

    return register


@_workload("single client get calls (Plasma Store)")
def _get_small(c: Context) -> Bench:
    value = c.rt.put(0)

    def get_small() -> None:
        c.rt.get(value)

    return get_small, 1


@_workload("single client put calls (Plasma Store)")
def _put_small(c: Context) -> Bench:
    def put_small() -> None:
        c.rt.put(0)

    return put_small, 1


@_workload("multi client put calls (Plasma Store)", extra=True)
def _put_multi_small(c: Context) -> Bench:
    def put_multi_small() -> None:
        c.rt.get([c.d.do_put_small.remote() for _ in range(10)])

    return put_multi_small, 1000


@_workload("single client put gigabytes")
def _put_large(c: Context) -> Bench:
    import numpy as np

    # 100 Mi int64 = 800 MiB; Ray counts each put as 0.8 "GB".
    arr = np.zeros(100 * 1024 * 1024, dtype=np.int64)

    def put_large() -> None:
        c.rt.put(arr)

    return put_large, 8 * 0.1


@_workload("single client tasks and get batch", extra=True)
def _tasks_and_get_batch(c: Context) -> Bench:
    def small_value_batch() -> int:
        submitted = [c.d.small_value.remote() for _ in range(1000)]
        c.rt.get(submitted)
        return 0

    return small_value_batch, 1  # Ray counts batches, not tasks, here


@_workload("multi client put gigabytes", extra=True)
def _put_multi(c: Context) -> Bench:
    def put_multi() -> None:
        c.rt.get([c.d.do_put.remote() for _ in range(10)])

    return put_multi, 10 * 8 * 0.1


@_workload("single client get object containing 10k refs", extra=True)
def _get_containing_refs(c: Context) -> Bench:
    obj_containing_ref = c.d.create_object_containing_ref.remote()

    def get_containing_object_ref() -> None:
        c.rt.get(obj_containing_ref)

    return get_containing_object_ref, 1


@_workload("single client wait 1k refs")
def _wait_1k(c: Context) -> Bench:
    def wait_multiple_refs() -> None:
        num_objs = 1000
        not_ready = [c.d.small_value.remote() for _ in range(num_objs)]
        # Ray triggers the fetch once; the raylet keeps the fetch requests.
        fetch_local = True
        for _ in range(num_objs):
            _ready, not_ready = c.rt.wait(not_ready, fetch_local=fetch_local)
            if fetch_local:
                fetch_local = False

    return wait_multiple_refs, 1  # one batch of 1000 submissions + 1000 waits per "call"


@_workload("single client tasks sync")
def _tasks_sync(c: Context) -> Bench:
    def small_task() -> None:
        c.rt.get(c.d.small_value.remote())

    return small_task, 1


@_workload("single client tasks async")
def _tasks_async(c: Context) -> Bench:
    def small_task_async() -> None:
        c.rt.get([c.d.small_value.remote() for _ in range(1000)])

    return small_task_async, 1000


@_workload("multi client tasks async", extra=True)
def _multi_client_tasks(c: Context) -> Bench:
    n, m = 10000, 4
    actors = [c.d.Actor.remote() for _ in range(m)]

    def multi_task() -> None:
        submitted = [a.small_value_batch.remote(n) for a in actors]
        c.rt.get(submitted)

    return multi_task, n * m


@_workload("1:1 actor calls sync")
def _actor_sync(c: Context) -> Bench:
    a = c.d.Actor.remote()

    def actor_sync() -> None:
        c.rt.get(a.small_value.remote())

    return actor_sync, 1


@_workload("1:1 actor calls async")
def _actor_async(c: Context) -> Bench:
    a = c.d.Actor.remote()

    def actor_async() -> None:
        c.rt.get([a.small_value.remote() for _ in range(1000)])

    return actor_async, 1000


@_workload("1:1 actor calls concurrent")
def _actor_concurrent(c: Context) -> Bench:
    # "concurrent" = a threaded actor: sync methods run on a pool of 16 threads.
    a = c.d.Actor.options(max_concurrency=16).remote()

    def actor_concurrent() -> None:
        c.rt.get([a.small_value.remote() for _ in range(1000)])

    return actor_concurrent, 1000


@_workload("1:n actor calls async")
def _actor_1_n(c: Context) -> Bench:
    # The caller is a Client *actor*, not the driver: the driver sends one call per batch.
    n = 5000
    actors = [c.d.Actor.remote() for _ in range(c.n_cpu)]
    client = c.d.Client.remote(actors)

    def actor_async_direct() -> None:
        c.rt.get(client.small_value_batch.remote(n))

    return actor_async_direct, n * len(actors)


@_workload("n:n actor calls async")
def _actor_n_n(c: Context) -> Bench:
    # m=4 tasks (1 CPU each) spread 5000 calls each over n_cpu actors.
    n, m = 5000, 4
    actors = [c.d.Actor.remote() for _ in range(c.n_cpu)]
    work = c.d.make_work(c.n_cpu, n)

    def actor_multi2() -> None:
        c.rt.get([work.remote(actors) for _ in range(m)])

    return actor_multi2, m * n


@_workload("n:n actor calls with arg async", extra=True)
def _actor_n_n_arg(c: Context) -> Bench:
    n = 1000
    actors = [c.d.Actor.remote() for _ in range(c.n_cpu)]
    clients = [c.d.Client.remote(a) for a in actors]

    def actor_multi2_direct_arg() -> None:
        c.rt.get([client.small_value_batch_arg.remote(n) for client in clients])

    return actor_multi2_direct_arg, n * len(clients)


@_workload("1:1 async-actor calls sync")
def _async_actor_sync(c: Context) -> Bench:
    a = c.d.AsyncActor.remote()

    def actor_sync() -> None:
        c.rt.get(a.small_value.remote())

    return actor_sync, 1


@_workload("1:1 async-actor calls async")
def _async_actor_async(c: Context) -> Bench:
    a = c.d.AsyncActor.remote()

    def async_actor() -> None:
        c.rt.get([a.small_value.remote() for _ in range(1000)])

    return async_actor, 1000


@_workload("1:1 async-actor calls with args async", extra=True)
def _async_actor_args(c: Context) -> Bench:
    a = c.d.AsyncActor.remote()

    def async_actor() -> None:
        c.rt.get([a.small_value_with_arg.remote(i) for i in range(1000)])

    return async_actor, 1000


@_workload("1:n async-actor calls async", extra=True)
def _async_actor_1_n(c: Context) -> Bench:
    n = 5000
    actors = [c.d.AsyncActor.remote() for _ in range(c.n_cpu)]
    client = c.d.Client.remote(actors)

    def async_actor_async() -> None:
        c.rt.get(client.small_value_batch.remote(n))

    return async_actor_async, n * len(actors)


@_workload("n:n async-actor calls async", extra=True)
def _async_actor_n_n(c: Context) -> Bench:
    n, m = 5000, 4
    actors = [c.d.AsyncActor.remote() for _ in range(c.n_cpu)]
    work = c.d.make_work(c.n_cpu, n)

    def async_actor_multi() -> None:
        c.rt.get([work.remote(actors) for _ in range(m)])

    return async_actor_multi, m * n


NUM_PGS = 100
NUM_BUNDLES = 1


@_workload("placement group create/removal", session="pg")
def _placement_groups(c: Context) -> Bench:
    util = c.rt.util

    def placement_group_create_removal() -> None:
        pgs = [
            util.placement_group(bundles=[{"custom": 0.001} for _ in range(NUM_BUNDLES)])
            for _ in range(NUM_PGS)
        ]
        for pg in pgs:
            # Ray waits through the GCS (pg.wait); pg.ready() would run a task per group.
            if hasattr(pg, "wait"):
                pg.wait(timeout_seconds=30)
            else:
                c.rt.get(pg.ready(), timeout=30)
        # Removal is part of the row, or later groups would slow down.
        for pg in pgs:
            util.remove_placement_group(pg)

    return placement_group_create_removal, NUM_PGS


WORKLOADS.append(Workload(STARTUP_ROW, None, session="probe"))
WORKLOADS.append(Workload(MEMORY_ROW, None, session="probe"))

SESSION_INIT_KWARGS: dict[str, dict[str, Any]] = {
    "default": {},
    "pg": {"resources": {"custom": 100}},
}


def select(filter: str | None = None, *, extra: bool = False) -> list[Workload]:
    """The rows a run with this filter measures, in Ray's order."""
    return [w for w in WORKLOADS if (extra or not w.extra) and (not filter or filter in w.name)]


# --------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _failed(name: str, unit: str, exc: BaseException) -> Result:
    error = _error_text(exc)
    print(f"{name} FAILED: {error}", flush=True)
    traceback.print_exception(exc, file=sys.stderr)
    return Result(name, unit, error=error)


def _run_session(
    rt: ModuleType,
    session: str,
    rows: list[Workload],
    timing: Timing,
    row_timeout: float | None,
    record: Callable[[Result], None],
) -> None:
    try:
        # Interrupting a start-up can orphan its processes: give init at least 2 minutes.
        with _deadline(max(row_timeout, 120.0) if row_timeout else None):
            rt.init(**SESSION_INIT_KWARGS[session])
    except Exception as exc:  # noqa: BLE001 - every row of the session fails alike
        error = f"init failed: {_error_text(exc)}"
        traceback.print_exception(exc, file=sys.stderr)
        for w in rows:
            print(f"{w.name} FAILED: {error}", flush=True)
            record(Result(w.name, "per second", error=error))
        with contextlib.suppress(Exception):
            rt.shutdown()
        return
    try:
        try:
            ctx = Context(rt, define(rt), max(1, multiprocessing.cpu_count() // 2))
        except Exception as exc:  # noqa: BLE001 - no row of the session can run
            for w in rows:
                record(_failed(w.name, "per second", exc))
            return
        for w in rows:
            assert w.setup is not None
            try:
                with _deadline(row_timeout):
                    fn, multiplier = w.setup(ctx)
                    result = timeit(w.name, fn, multiplier, timing)
            except Exception as exc:  # noqa: BLE001 - report and go on with the others
                result = _failed(w.name, "per second", exc)
            finally:
                # Drop the row's actors and objects before the next row, as Ray does by
                # rebinding its variables.
                fn = multiplier = None  # type: ignore[assignment]
                gc.collect()
            record(result)
    finally:
        try:
            rt.shutdown()
        except Exception:  # noqa: BLE001 - the rows are measured; say so and go on
            print("shutdown raised:", file=sys.stderr)
            traceback.print_exc()


def run(
    rt: ModuleType,
    *,
    filter: str | None = None,
    duration: float | None = None,
    quick: bool = False,
    timing: Timing | None = None,
    extra: bool = False,
    row_timeout: float | None = 600.0,
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run the selected workloads on runtime module ``rt`` and return their results.

    ``quick`` uses short trials (smoke tests); ``duration`` overrides the trial length.
    A workload that raises, or gives no result within ``row_timeout`` seconds, is printed
    as ``<name> FAILED: <error>`` and the others go on. ``on_result`` is called with each
    row's result as soon as it is known.
    """
    timing = timing or (QUICK_TIMING if quick else RAY_TIMING)
    if duration is not None:
        timing = replace(timing, duration=duration)
    if rt.__name__ == "ray":
        # No usage reports leave the machine from a benchmark run.
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    rows = select(filter, extra=extra)
    results: dict[str, Result] = {}

    def record(r: Result) -> None:
        results[r.name] = r
        if on_result is not None:
            on_result(r)

    for session in ("default", "pg"):
        group = [w for w in rows if w.session == session]
        if group:
            _run_session(rt, session, group, timing, row_timeout, record)
    # Probes last: a fresh process each, while no node of this process is up.
    for w in rows:
        if w.session != "probe":
            continue
        try:
            if w.name == STARTUP_ROW:
                record(measure_startup(rt.__name__, runs=3, settle=timing.settle))
            else:
                record(measure_idle_memory(rt.__name__, settle=timing.settle))
        except Exception as exc:  # noqa: BLE001
            unit = "seconds" if w.name == STARTUP_ROW else "MB"
            record(_failed(w.name, unit, exc))
    return [results[w.name] for w in rows]


# --------------------------------------------------------------------------------------
# Probes: fresh processes for start-up time and idle memory
# --------------------------------------------------------------------------------------


def _run_probe(kind: str, runtime: str, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    env[PROBE_MARK_ENV] = uuid.uuid4().hex
    if runtime == "ray":
        env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cmd = [sys.executable, "-c", _PROBE_LAUNCHER, os.path.abspath(__file__), kind, runtime]
    with tempfile.TemporaryDirectory(prefix="microbenchmark-probe-") as cwd:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Its own process group (to end it on timeout) but not its own session: a
            # caller that tracks its processes by session still sees the probe's.
            process_group=0,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise RowTimeout(f"{kind} probe gave no result within {timeout:g} s") from None
    for line in out.splitlines():
        if line.startswith(_PROBE_PREFIX):
            data: dict[str, Any] = json.loads(line[len(_PROBE_PREFIX) :])
            if "error" in data:
                raise RuntimeError(data["error"])
            return data
    tail = "; ".join(err.strip().splitlines()[-3:])
    raise RuntimeError(f"{kind} probe exited with {proc.returncode} and no result: {tail}")


def wait_quiet(max_wait: float, busy_below: float = 10.0) -> float:
    """Wait (at most ``max_wait`` s) until the machine's CPUs are under ``busy_below`` %
    busy over half a second: the processes of the previous node may still be exiting."""
    if max_wait <= 0:
        return 0.0
    import psutil

    start = time.perf_counter()
    while time.perf_counter() - start < max_wait:
        if psutil.cpu_percent(interval=0.5) < busy_below:
            break
    return time.perf_counter() - start


def measure_startup(
    runtime: str, runs: int = 3, timeout: float = 120.0, settle: float = 0.0
) -> Result:
    """``init -> first task -> shutdown`` in fresh processes: best and mean of ``runs``.
    Before each run, wait up to ``settle`` seconds for the machine to go quiet."""
    samples = []
    for _ in range(runs):
        wait_quiet(settle)
        samples.append(_run_probe("startup", runtime, timeout))
    totals = [s["total"] for s in samples]
    best, mean = min(totals), statistics.fmean(totals)
    print(
        STARTUP_ROW,
        "seconds best",
        round(best, 3),
        "mean",
        round(mean, 3),
        f"({runs} runs)",
        flush=True,
    )
    return Result(
        STARTUP_ROW,
        "seconds",
        best,
        statistics.pstdev(totals),
        extra={"best": best, "mean": mean, "runs": samples},
    )


def measure_idle_memory(runtime: str, timeout: float = 180.0, settle: float = 0.0) -> Result:
    """Resident memory of an idle local node: the driver plus every process of the node."""
    wait_quiet(settle)
    data = _run_probe("memory", runtime, timeout)
    print(
        MEMORY_ROW,
        "MB",
        round(data["rss_mb"], 1),
        "in",
        data["processes"],
        "processes",
        f"(PSS {data['pss_mb']:.1f} MB)" if data.get("pss_mb") is not None else "",
        flush=True,
    )
    for p in data["detail"]:
        print(f"    {p['rss_mb']:8.1f} MB  pid {p['pid']:<7} {p['name']:<18} {p['cmd']}")
    return Result(MEMORY_ROW, "MB", data["rss_mb"], extra=data)


def _probe_startup(rt: ModuleType) -> dict[str, Any]:
    @rt.remote
    def trivial() -> int:
        return 1

    t0 = time.perf_counter()
    rt.init()
    try:
        t1 = time.perf_counter()
        value = rt.get(trivial.remote())
        t2 = time.perf_counter()
    finally:
        rt.shutdown()
    t3 = time.perf_counter()
    if value != 1:
        raise RuntimeError(f"the trivial task returned {value!r}")
    return {"total": t3 - t0, "init": t1 - t0, "first_task": t2 - t1, "shutdown": t3 - t2}


def _session_markers(rt: ModuleType) -> list[str]:
    """Strings that appear in the command lines of this node's processes (Ray: the
    session name and directory)."""
    getters: list[Callable[[], object]] = [
        lambda: rt._private.worker._global_node.session_name,
        lambda: rt._private.worker._global_node.get_session_dir_path(),
        lambda: rt.get_runtime_context().session_name,
        lambda: sys.modules[f"{rt.__name__}.api"]._node.session_dir,
        lambda: sys.modules[f"{rt.__name__}.global_state"].worker.node["session_dir"],
    ]
    markers: list[str] = []
    for get in getters:
        try:
            value = get()
        except Exception:  # noqa: BLE001 - attribute paths differ between runtimes
            continue
        if isinstance(value, str) and len(value) >= 8 and value not in markers:
            markers.append(value)
    return markers


def node_processes(mark: str | None, markers: Sequence[str]) -> dict[int, Any]:
    """The driver, its descendants, and processes that name the session on their command
    line or carry the probe's environment mark."""
    import psutil

    me = psutil.Process()
    found: dict[int, psutil.Process] = {me.pid: me}
    for child in me.children(recursive=True):
        found[child.pid] = child
    for p in psutil.process_iter(["cmdline"]):
        if p.pid in found:
            continue
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if any(m in cmd for m in markers) or (mark and p.environ().get(PROBE_MARK_ENV) == mark):
                found[p.pid] = p
        except psutil.Error:
            continue
    alive: dict[int, psutil.Process] = {}
    for pid, p in found.items():
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                alive[pid] = p
        except psutil.Error:
            continue
    return alive


def _probe_memory(
    rt: ModuleType,
    *,
    quiet_cpu_percent: float = 10.0,
    quiet_seconds: int = 2,
    max_wait: float = 90.0,
) -> dict[str, Any]:
    import psutil

    mark = os.environ.get(PROBE_MARK_ENV)
    started = time.perf_counter()
    rt.init()
    try:
        init_s = time.perf_counter() - started
        markers = _session_markers(rt)
        # Idle: the same processes for `quiet_seconds` one-second samples in a row, using
        # together less than `quiet_cpu_percent` of one core.
        cache: dict[int, psutil.Process] = {}
        previous: frozenset[int] = frozenset()
        quiet = 0
        t_idle = time.perf_counter()
        while True:
            procs = node_processes(mark, markers)
            cpu = 0.0
            for pid, p in procs.items():
                proc = cache.setdefault(pid, p)
                with contextlib.suppress(psutil.Error):
                    cpu += proc.cpu_percent(None)
            pids = frozenset(procs)
            quiet = quiet + 1 if pids == previous and cpu < quiet_cpu_percent else 0
            previous = pids
            waited = time.perf_counter() - t_idle
            if quiet >= quiet_seconds or waited > max_wait:
                break
            time.sleep(1.0)
        procs = node_processes(mark, markers)
        detail = []
        rss = 0
        pss: int | None = 0
        for pid, p in sorted(procs.items()):
            try:
                mem = p.memory_info()
                cmd = " ".join(" ".join(p.cmdline()).split())
                name = p.name()
            except psutil.Error:
                continue
            rss += mem.rss
            try:
                full = p.memory_full_info()
                if pss is not None:
                    pss += getattr(full, "pss", 0)
            except (psutil.Error, AttributeError):
                pss = None
            detail.append({"pid": pid, "name": name, "rss_mb": mem.rss / MIB, "cmd": cmd[:160]})
        detail.sort(key=lambda d: -d["rss_mb"])
        return {
            "rss_mb": rss / MIB,
            "pss_mb": None if pss is None else pss / MIB,
            "processes": len(detail),
            "idle_reached": quiet >= quiet_seconds,
            "idle_wait_s": time.perf_counter() - t_idle,
            "init_s": init_s,
            "session_markers": markers,
            "detail": detail,
        }
    finally:
        rt.shutdown()


def probe_main(argv: Sequence[str]) -> int:
    """Entry point of a probe process: ``probe_main([kind, runtime])``."""
    kind, runtime = argv
    try:
        rt = importlib.import_module(runtime)
        if kind == "startup":
            out = _probe_startup(rt)
        elif kind == "memory":
            out = _probe_memory(rt)
        else:
            raise ValueError(f"unknown probe {kind!r}")
    except Exception as exc:  # noqa: BLE001 - the parent reports it as the row's error
        traceback.print_exc()
        out = {"error": _error_text(exc)}
    print(_PROBE_PREFIX + json.dumps(out), flush=True)
    return 0 if "error" not in out else 1


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ember microbenchmark",
        description="Run the workloads of `ray microbenchmark` (plus Ember's start-up time "
        "and idle memory rows) on Ember or, with --runtime ray, on Ray.",
    )
    p.add_argument(
        "--filter",
        default=os.environ.get("TESTS_TO_RUN") or None,
        help="run only rows whose name contains SUBSTRING (default: $TESTS_TO_RUN, as Ray)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="short trials and no settle sleep: a smoke test, not a measurement",
    )
    p.add_argument("--json", metavar="FILE", help="write the results to FILE as JSON")
    p.add_argument(
        "--runtime",
        default="ember",
        help="module implementing Ray's API to measure (default: ember)",
    )
    p.add_argument(
        "--extra",
        action="store_true",
        help="also run the rows of `ray microbenchmark` outside the comparison set",
    )
    p.add_argument("--duration", type=float, help="seconds per trial (Ray: 2)")
    p.add_argument("--trials", type=int, help="trials per row (Ray: 4)")
    p.add_argument("--warmup", type=float, help="warm-up seconds per row (Ray: 1)")
    p.add_argument(
        "--settle", type=float, help="seconds to sleep before each row (Ray: 10; --quick: 0)"
    )
    p.add_argument(
        "--row-timeout",
        type=float,
        default=600.0,
        help="fail a row that gives no result in this many seconds (0: never)",
    )
    p.add_argument("--list", action="store_true", help="print the selected rows and exit")
    return p


def _write_json(
    path: str,
    rt: ModuleType,
    args: argparse.Namespace,
    timing: Timing,
    started: float,
    results: list[Result],
    complete: bool = False,
) -> None:
    doc = {
        "runtime": args.runtime,
        "version": getattr(rt, "__version__", None),
        "python": platform.python_version(),
        "cpu_count": multiprocessing.cpu_count(),
        "timing": asdict(timing),
        "filter": args.filter,
        "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
        "elapsed_s": time.time() - started,
        "complete": complete,
        "results": [asdict(r) for r in results],
    }
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    rows = select(args.filter, extra=args.extra)
    if args.list:
        for w in rows:
            print(w.name)
        return 0
    if not rows:
        print(f"no row matches --filter {args.filter!r}", file=sys.stderr)
        return 2
    try:
        rt = importlib.import_module(args.runtime)
    except ImportError as exc:
        print(f"cannot import runtime {args.runtime!r}: {exc}", file=sys.stderr)
        return 2
    if getattr(rt, "__file__", None) is None:
        print(
            f"{args.runtime!r} imported as a namespace package from {list(rt.__path__)}: is "
            f"there a directory named {args.runtime!r} in the current directory? Run from "
            "another one.",
            file=sys.stderr,
        )
        return 2
    if not callable(getattr(rt, "init", None)):
        print(
            f"{args.runtime} runtime not built yet: {args.runtime}.init does not exist "
            f"(module {rt.__file__})",
            file=sys.stderr,
        )
        return 2
    timing = QUICK_TIMING if args.quick else RAY_TIMING
    overrides = {
        k: getattr(args, k)
        for k in ("duration", "trials", "warmup", "settle")
        if getattr(args, k) is not None
    }
    timing = replace(timing, **overrides)
    started = time.time()
    done: list[Result] = []

    def on_result(r: Result) -> None:
        # Written after every row, so a run that dies part-way still leaves its rows.
        done.append(r)
        if args.json:
            _write_json(args.json, rt, args, timing, started, done)

    results = run(
        rt,
        filter=args.filter,
        timing=timing,
        extra=args.extra,
        row_timeout=args.row_timeout or None,
        on_result=on_result,
    )
    if args.json:
        _write_json(args.json, rt, args, timing, started, results, complete=True)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
