#!/usr/bin/env python3
"""Ray 2.60's fake multi-node autoscaler and Ember's, side by side on this machine (issue 34's
performance targets).

One workload, the same code on both (the runtime imported by name): a head with no CPUs and
one worker type of 1 CPU (0 to N nodes, a 10 s idle timeout); a burst of N one-CPU tasks that
each hold until released; the burst starts once the system's autoscaler loop runs. Measured
per system:

- demand to the first ready worker node, and to all N;
- the autoscaler's own CPU over 10 s with N nodes up (its steady state);
- after the release, the last task's end to 0 worker nodes (the 10 s idle timeout included),
  and the burst's start to 0 worker nodes again, less the hold between every task running
  and the release (the burst as one piece of work sees it: 0 to N to 0);
- tasks lost or run twice (each task leaves a marker file per execution).

Ray's half starts its fake multi-node cluster as ``ray.cluster_utils.AutoscalingCluster``
would (the same config, ``RAY_FAKE_CLUSTER=1``, ``AUTOSCALER_UPDATE_INTERVAL_S=1``) but
without its ``ray stop --force``, which would end every Ray process on the machine: its
processes run in a session of their own, and only that session is stopped. Ember's half
uses ``ember.cluster_utils.AutoscalingCluster`` with the same 1 s tick.

    .venv/bin/python benchmarks/autoscaler_compare.py            # N = 20
    .venv/bin/python benchmarks/autoscaler_compare.py --quick    # N = 4
    .venv/bin/python benchmarks/autoscaler_compare.py --quick --only ember

Only the standard library is imported at the top: Ray's interpreter runs this same file.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from halves import (  # benchmarks/: the script's own directory
    half_parser,
    machine_line,
    run_halves,
    stop_on_sigterm,
)

SIZES = {"full": 20, "quick": 4}
IDLE_TIMEOUT_S = 10.0
TICK_S = 1.0
DEADLINE_S = 600.0
PHASE_S = 150.0  # the time each figure has to happen
# Issue 34: "0 -> N nodes for a burst of work, then back to 0 after a 10 s idle timeout:
# both ends >= 3x sooner". Both ends are read from the burst's start: all N nodes up, and 0
# again. The last task's end to 0 is shown too; with the same 10 s timeout on both sides it
# cannot be 3x Ray's (the timeout alone is 10 s of it).
TARGETS = {"first_node_s": 3.0, "all_nodes_s": 3.0, "burst_to_zero_s": 3.0}


# --------------------------------------------------------------------------------------
# One half: runs inside Ray's or Ember's interpreter
# --------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayFakeCluster:
    """Ray's fake multi-node cluster in a session of its own (so that stopping it stops
    nothing else)."""

    def __init__(self, n: int, work: Path) -> None:
        self.work = work
        # Ray's fake provider starts its worker nodes against the GCS at the default port.
        self.port = 6379
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                raise RuntimeError("port 6379 is taken: Ray's fake multi-node cluster needs it")
        config = {
            "cluster_name": "fake_multinode",
            "max_workers": n,
            "provider": {
                "type": "fake_multinode",
                "use_node_id_as_ip": True,
                "disable_node_updaters": True,
                "disable_launch_config_check": True,
            },
            "available_node_types": {
                "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
                "worker": {
                    "resources": {"CPU": 1, "object_store_memory": 100_000_000},
                    "node_config": {},
                    "min_workers": 0,
                    "max_workers": n,
                },
            },
            "head_node_type": "ray.head.default",
            "auth": {},
            "upscaling_speed": 1.0,
            "idle_timeout_minutes": IDLE_TIMEOUT_S / 60,
            "docker": {},
            "initialization_commands": [],
            "setup_commands": [],
            "head_setup_commands": [],
            "worker_setup_commands": [],
            "head_start_ray_commands": [],
            "worker_start_ray_commands": [],
            "file_mounts": {},
            "cluster_synced_files": [],
            "file_mounts_sync_continuously": False,
            "rsync_exclude": [],
            "rsync_filter": [],
        }
        path = work / "ray-cluster.json"
        path.write_text(json.dumps(config))
        ray_cli = str(Path(sys.executable).with_name("ray"))
        # A loopback-only benchmark cluster: Ray's token auth off, for its CLI and this driver.
        os.environ["RAY_AUTH_MODE"] = "disabled"
        env = {
            **os.environ,
            "AUTOSCALER_UPDATE_INTERVAL_S": str(int(TICK_S)),
            "RAY_FAKE_CLUSTER": "1",
        }
        cmd = [ray_cli, "start", "--head", f"--autoscaling-config={path}", "--num-cpus=0"]
        cmd += [f"--port={self.port}", "--node-ip-address=127.0.0.1", "--include-dashboard=false"]
        cmd += [f"--temp-dir={work / 'ray'}"]  # not /tmp/ray: another Ray on this machine
        starter = subprocess.Popen(cmd, env=env, start_new_session=True)
        self.session = starter.pid  # every process it starts keeps this session id
        if starter.wait(timeout=180) != 0:
            self.stop()
            raise RuntimeError(f"ray start exited {starter.returncode}")
        self.address = f"127.0.0.1:{self.port}"

    def processes(self) -> list[int]:
        """Its session's processes, and any that left the session but name its temp dir
        (Ray's GCS server does)."""
        out = []
        mark = str(self.work).encode()
        for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
            try:
                if os.getsid(pid) == self.session:
                    out.append(pid)
                    continue
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if mark in f.read():
                        out.append(pid)
            except OSError:
                pass
        return [p for p in out if p != os.getpid()]

    def autoscaler_running(self) -> bool:
        """Its monitor's loop runs: it logs each update, waiting for load metrics or not."""
        for log in (self.work / "ray").glob("session_*/logs/monitor.log"):
            text = log.read_text(errors="replace")
            if "load metrics" in text or "Resources" in text:
                return True
        return False

    def monitor_pid(self) -> int | None:
        for pid in self.processes():
            try:
                if b"monitor.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
            except OSError:
                pass
        return None

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.processes():
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            deadline = time.monotonic() + 15
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.2)


class EmberFakeCluster:
    def __init__(self, n: int, work: Path) -> None:
        from ember.cluster_utils import AutoscalingCluster

        self.cluster = AutoscalingCluster(
            head_resources={"CPU": 0},
            worker_node_types={
                "worker": {
                    "resources": {"CPU": 1},
                    "node_config": {},
                    "min_workers": 0,
                    "max_workers": n,
                }
            },
            idle_timeout_minutes=IDLE_TIMEOUT_S / 60,
            upscaling_speed=1.0,
        )
        self.cluster.start(interval=TICK_S)
        self.address = self.cluster.address
        self.work = work

    def autoscaler_running(self) -> bool:
        """Its monitor's loop runs (it logs this before its first tick)."""
        try:
            with open(self.cluster.log_path) as f:
                return "autoscaler started" in f.read()
        except FileNotFoundError:
            return False

    def monitor_pid(self) -> int | None:
        return self.cluster.monitor.pid if self.cluster.monitor else None

    def stop(self) -> None:
        import shutil

        # The autoscaler's log outlives the cluster's directory, beside the markers.
        shutil.copy(self.cluster.log_path, self.work / "autoscaler.log")
        self.cluster.shutdown()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _worker_nodes(rt: Any) -> int:
    return sum(1 for n in rt.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0))


def _wait(predicate: Any, what: str, deadline: float) -> float | None:
    """When ``predicate`` first held (monotonic time), or None if not by the deadline."""
    print(f"[{time.strftime('%H:%M:%S')}] waiting for {what}", file=sys.stderr, flush=True)
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.1)
    print(f"[{time.strftime('%H:%M:%S')}] gave up waiting for {what}", file=sys.stderr)
    return None


def _since(t: float | None, t0: float) -> float | None:
    return None if t is None else t - t0


def run_half(system: str, n: int) -> dict:
    import importlib

    rt = importlib.import_module(system)
    work = Path(tempfile.mkdtemp(prefix=f"as-bench-{system}-"))
    markers, release = work / "markers", work / "release"
    markers.mkdir()
    cluster = (RayFakeCluster if system == "ray" else EmberFakeCluster)(n, work)
    out: dict[str, Any] = {}
    try:
        rt.init(address=cluster.address)
        # The clock starts with each autoscaler's loop running: its own start-up (a Python
        # process's imports) is not the time from demand to a node.
        if _wait(cluster.autoscaler_running, "the autoscaler", time.monotonic() + PHASE_S) is None:
            raise RuntimeError(f"{system}'s autoscaler never started")

        @rt.remote(num_cpus=1)
        def hold(i: int, markers: str, release: str) -> tuple[float, float]:
            Path(markers, f"{i}-{os.getpid()}-{time.time_ns()}").touch()
            started = time.time()
            deadline = time.monotonic() + DEADLINE_S
            while not os.path.exists(release) and time.monotonic() < deadline:
                time.sleep(0.05)
            return started, time.time()

        t0 = time.monotonic()
        refs = [hold.remote(i, str(markers), str(release)) for i in range(n)]
        phase = t0 + PHASE_S  # each figure has PHASE_S to happen; one that does not is None
        out["first_node_s"] = _since(_wait(lambda: _worker_nodes(rt) >= 1, "a node", phase), t0)
        out["all_nodes_s"] = _since(_wait(lambda: _worker_nodes(rt) >= n, f"{n} nodes", phase), t0)

        def started() -> bool:
            done, _ = rt.wait(refs, num_returns=len(refs), timeout=0)
            if done:  # a task that ends before the release failed: its error, now
                rt.get(done)
            return len(list(markers.iterdir())) >= n

        out["all_started_s"] = _since(_wait(started, "every task running", t0 + PHASE_S), t0)
        out["running_at_once"] = len(list(markers.iterdir()))
        pid = cluster.monitor_pid()
        if pid and out["all_started_s"] is not None:
            time.sleep(2.0)  # past the launches' own bookkeeping
            c0, w0 = _cpu_seconds(pid), time.monotonic()
            time.sleep(10.0)
            out["monitor_cpu_pct"] = 100 * (_cpu_seconds(pid) - c0) / (time.monotonic() - w0)
        released = time.monotonic()
        release.touch()  # tasks that never started run now, one after another if need be
        ends = [end for _, end in rt.get(refs, timeout=DEADLINE_S)]
        last_end = max(ends)
        zero = _wait(lambda: _worker_nodes(rt) == 0, "0 nodes", time.monotonic() + PHASE_S)
        if zero is not None:
            out["scale_down_s"] = time.time() - (time.monotonic() - zero) - last_end
            if out["all_started_s"] is not None:
                # The whole burst, 0 to N to 0, as one piece of work would see it: from
                # its submission to the cluster back at 0, less the hold this benchmark
                # adds (every task running until the release, for the CPU figure).
                held = released - (t0 + out["all_started_s"])
                out["burst_to_zero_s"] = zero - t0 - held
        runs: dict[str, int] = {}
        for marker in markers.iterdir():
            i = marker.name.split("-")[0]
            runs[i] = runs.get(i, 0) + 1
        out["lost"] = n - len(runs)
        out["rerun"] = sum(c - 1 for c in runs.values())
    finally:
        try:
            rt.shutdown()
        finally:
            cluster.stop()
    return out


# --------------------------------------------------------------------------------------
# The driver: both halves, then the table
# --------------------------------------------------------------------------------------


ROWS = [
    ("first_node_s", "demand to the first ready worker node (s)"),
    ("all_nodes_s", "demand to all N worker nodes (s)"),
    ("all_started_s", "demand to every task running at once (s)"),
    ("running_at_once", "tasks running at once, at most"),
    ("scale_down_s", "last task's end to 0 worker nodes (s; 10 s idle timeout)"),
    ("burst_to_zero_s", "demand to 0 worker nodes again, the hold excluded (s)"),
    ("monitor_cpu_pct", "autoscaler CPU with N nodes up (% of a core)"),
    ("lost", "tasks lost"),
    ("rerun", "tasks run twice"),
]


def print_table(results: dict[str, dict], n: int) -> None:
    print(machine_line(f"N = {n}"))
    print("| workload | Ray 2.60 | Ember | Ray / Ember | target |")
    print("|---|---|---|---|---|")
    for key, label in ROWS:
        ray, ember = results.get("ray", {}).get(key), results.get("ember", {}).get(key)
        ratio = ""
        if key.endswith("_s") and ray is not None and ember:
            ratio = f"{ray / ember:.2f}"
        target = f">= {TARGETS[key]:g}" if key in TARGETS else ""
        if key == "monitor_cpu_pct":
            target = "Ember <= 2"
        if key in ("lost", "rerun"):
            target = "0"
        cells = []
        for system, v in (("ray", ray), ("ember", ember)):
            if isinstance(v, float):
                cells.append(f"{v:.2f}")
            elif v is None:  # measured but never happened, or that side was not run
                ran = key in results.get(system, {})
                cells.append(f"not within {PHASE_S:.0f} s" if ran else "")
            else:
                cells.append(str(v))
        print(f"| {label} | {cells[0]} | {cells[1]} | {ratio} | {target} |")


def main(argv: list[str] | None = None) -> int:
    parser = half_parser(
        __doc__.split("\n")[0], "N = 4 instead of 20", "the interpreter that has Ray"
    )
    args = parser.parse_args(argv)
    stop_on_sigterm()
    n = SIZES["quick" if args.quick else "full"]
    if args.half:
        Path(args.json).write_text(json.dumps(run_half(args.half, n)))
        return 0
    results = run_halves(__file__, args.quick, args.only, args.ray_python)
    if results is None:
        return 2
    print_table(results, n)
    if args.json:
        Path(args.json).write_text(json.dumps({"n": n, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
