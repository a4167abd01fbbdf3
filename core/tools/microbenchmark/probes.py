"""Fresh processes for the start-up time and idle-memory rows, and the node processes they count."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from .timing import (
    _PROBE_LAUNCHER,
    _PROBE_PREFIX,
    MEMORY_ROW,
    MIB,
    PROBE_MARK_ENV,
    STARTUP_ROW,
    Result,
    RowTimeout,
    error_text,
)

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _run_probe(kind: str, runtime: str, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    env[PROBE_MARK_ENV] = uuid.uuid4().hex
    if runtime == "ray":
        env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cmd = [sys.executable, "-c", _PROBE_LAUNCHER, PACKAGE_DIR, kind, runtime]
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
        out = {"error": error_text(exc)}
    print(_PROBE_PREFIX + json.dumps(out), flush=True)
    return 0 if "error" not in out else 1
