"""Helpers for Ember's tests (imported by conftest and by test modules)."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from ember.tools.ports import free_port  # noqa: F401  (tests import it from here)

# A counter actor's class for the driver programs tests run as subprocesses (each decorates
# it with the options it needs).
COUNTER_SOURCE = """
class Counter:
    def __init__(self):
        self.n = 0

    def inc(self):
        self.n += 1
        return self.n
"""


def ember_children() -> list[psutil.Process]:
    """Ember processes descended from this test process (GCS, raylets, workers)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "ember." in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, message=""):
    """Polls ``predicate`` until it returns a truthy value; fails the test at the deadline.
    ``message`` may be a callable, called at the deadline, to name what was last seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            what = message() if callable(message) else message
            pytest.fail(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


def printed_to(monkeypatch, stream: str = "stderr") -> io.StringIO:
    """What this process prints to ``sys.<stream>`` from now on (the driver's I/O thread
    prints warnings and worker lines there), to poll with ``getvalue()``. Polling
    ``capfd.readouterr()`` instead loses a print that lands between its read of the capture
    file and its truncation of it: a race with every thread that prints meanwhile."""
    buf = io.StringIO()
    monkeypatch.setattr(sys, stream, buf)
    return buf


def assert_no_ember_children(timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while ember_children():
        if time.monotonic() > deadline:
            left = [(p.pid, " ".join(p.cmdline())[:120]) for p in ember_children()]
            pytest.fail(f"Ember processes left behind: {left}")
        time.sleep(0.05)


def dashboard_url_in(output: str) -> str:
    """The URL on ``ember start``'s "Dashboard: ..." line (which also says when the asked-for
    port was taken and another used)."""
    import re

    m = re.search(r"^\s*Dashboard: .*?(https?://\S+)", output, re.MULTILINE)
    assert m, f"no dashboard URL in: {output!r}"
    return m.group(1).rstrip("/")


def ember_cli() -> str:
    """The ``ember`` command of this test run's environment."""
    import sys
    from pathlib import Path

    return str(Path(sys.executable).with_name("ember"))


@contextlib.contextmanager
def head_cluster(*extra: str, prefix: str = "emb-head-"):
    """``ember start --head`` as a user runs it (a subprocess) on loopback with one CPU, a small
    store and its own temp root, plus ``extra`` options; yields ``(root, port, result)`` and
    stops the cluster (``ember stop --force --temp-dir``), checking nothing is left."""
    import shutil
    import subprocess
    import tempfile

    from ember.session_processes import find_ember_processes

    root = tempfile.mkdtemp(prefix=prefix, dir="/tmp")  # short: Unix socket paths
    port = free_port()
    argv = [ember_cli(), "start", "--head", "--port", str(port), "--num-cpus", "1"]
    argv += ["--node-ip-address", "127.0.0.1", "--temp-dir", root]
    argv += ["--object-store-memory", str(64 * 2**20), *extra]
    try:
        head = subprocess.run(argv, capture_output=True, text=True, timeout=90)
        assert head.returncode == 0, head.stderr
        yield root, port, head
    finally:
        subprocess.run(
            [ember_cli(), "stop", "--force", "--temp-dir", root], capture_output=True, timeout=90
        )
        left = find_ember_processes(root)
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"ember stop left processes behind: {left}"


def wait_for_node_agents(dashboard_url: str, nodes: int = 1, timeout: float = 30.0) -> None:
    """Waits until the agents of ``nodes`` nodes stream to the dashboard (each has sent a
    sample). ``init()`` returns before they do: a query in the node's first second sees the
    node as not yet reachable (and names it in ``missing``)."""
    import json
    import urllib.request

    def agents() -> bool:
        # A node's CPU figure comes only from its agent's samples (the head's agent runs in
        # the dashboard's process, the others are processes of their own).
        url = f"{dashboard_url.rstrip('/')}/api/nodes?limit=1000"
        with urllib.request.urlopen(url, timeout=10) as r:
            items = json.load(r)["items"]
        return sum(n["cpu_percent"] is not None for n in items) >= nodes

    wait_until(agents, timeout=timeout, interval=0.1, message=f"{nodes} agent(s) to report")


def fake_spawn(monkeypatch, supervisor, code: str) -> list:
    """Makes ``supervisor._spawn`` start ``python -c code`` instead of its process; returns
    the list the started processes are appended to."""
    import subprocess
    import sys

    spawned: list[subprocess.Popen] = []

    def spawn(*_args) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", code])
        spawned.append(proc)
        return proc

    monkeypatch.setattr(supervisor, "_spawn", spawn)
    return spawned


def process_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie its parent has not reaped yet counts as
    exited: ``psutil.pid_exists`` says True for one)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# Ray 2.60 in its own environment, for the programs run on both runtimes.
REPO_ROOT = Path(__file__).resolve().parents[1]
RAY_PYTHON = REPO_ROOT / "tests" / "tools" / ".ray-venv" / "bin" / "python"
RAY_SETUP = (
    "scripts/dev.sh setup (or: python3 scripts/ray_venv.py tests/tools/.ray-venv "
    "'ray[default,tune,serve]==2.60.0')"
)


def require_ray_python() -> Path:
    """Ray's interpreter; skips the test without it, except in CI where it fails."""
    if not RAY_PYTHON.exists():
        why = f"Ray is not installed (no {RAY_PYTHON.relative_to(REPO_ROOT)}); run {RAY_SETUP}"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(why)
        pytest.skip(why)
    return RAY_PYTHON


def _compare_env() -> dict[str, str]:
    # Each run starts its own local node: no address or setting of the test run leaks in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_", "RAY_"))}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


@contextlib.contextmanager
def ray_alone(timeout: float = 900.0):
    """Held while a Ray cluster of a side-by-side runs, across the suite's processes: two
    Ray clusters at once on two cores made Ray miss its own cancels for 60 s (a timing of
    Ray's, not a semantic), and Ray's fake cluster takes a fixed port."""
    with open(os.path.join(tempfile.gettempdir(), "ember-tests-ray.lock"), "a") as f:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another test held Ray's turn for {timeout:.0f} s")
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def differences_after_a_second_reading(
    program: Path, ray_python: Path | str, ember: dict, ray: dict
) -> tuple[dict, dict]:
    """``compare_differences``; when there are any, Ray's side is run again, alone (up to
    twice more while differences remain), and a case differs only if Ember's answer is none
    of Ray's readings: Ray's answers under load are not always its own (a cancel that lands
    after 60 s, a child that never sees its interrupt, a cancelled stream that once ended
    with no error on two readings during a suite), while a real difference of Ember's shows
    in every reading. (differences, the last Ray reading)."""
    differ = first = compare_differences(ember, ray)
    readings = [ray]
    while differ and len(readings) < 3:
        print(f"Ray's reading {len(readings)} differs on {sorted(differ)}: reading Ray again")
        again = run_compare_program(program, ray_python, "ray")
        readings.append(again)
        # Only what differed in every reading so far still differs.
        differ = {c: v for c, v in compare_differences(ember, again).items() if c in differ}
    for case, (mine, theirs) in list(differ.items()):
        if case in first and _no_answer(theirs) and _no_answer(first[case][1]):
            # Ray gave no answer in time on its readings (its cancels, on two busy
            # cores): nothing to judge by. Said, not hidden; Ember's own tests check it.
            print(f"Ray gave no answer for {case} on {len(readings)} readings; Ember's: {mine}")
            del differ[case]
    return differ, readings[-1]


def _no_answer(outcome: Any) -> bool:
    """A comparison outcome that is a wait running out, not an answer: None (a poll that
    saw nothing) or a get that raised GetTimeoutError."""
    if outcome is None:
        return True
    return (
        isinstance(outcome, list)
        and len(outcome) >= 2
        and outcome[0] == "raised"
        and "GetTimeoutError" in (outcome[1] or [])
    )


def compare_differences(ember: dict, ray: dict) -> dict:
    """The cases whose outcomes differ between two runs of a comparison program, as
    ``{"section.case": (Ember's, Ray's)}``; a section that crashed on one side is one entry."""
    differ = {}
    for section in ember["same"] | ray["same"]:
        mine, theirs = ember["same"].get(section), ray["same"].get(section)
        if not isinstance(mine, dict) or not isinstance(theirs, dict):
            if mine != theirs:
                differ[section] = (mine, theirs)
            continue
        for case in mine | theirs:
            if mine.get(case) != theirs.get(case):
                differ[f"{section}.{case}"] = (mine.get(case), theirs.get(case))
    return differ


def _compare_output(runtime: str, returncode: int, stdout: str, stderr: str) -> dict:
    assert returncode == 0, f"{runtime} run failed:\n{stderr[-3000:]}"
    return json.loads(stdout.strip().splitlines()[-1])


def run_compare_program(
    program: Path, python: Path | str, runtime: str, timeout: float = 300
) -> dict:
    """Runs a program of ``tests/tools`` on one runtime; its last line of output, as JSON."""
    with ray_alone() if runtime == "ray" else contextlib.nullcontext():
        done = subprocess.run(
            [str(python), str(program), runtime],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_compare_env(),
            cwd=REPO_ROOT,
        )
    return _compare_output(runtime, done.returncode, done.stdout, done.stderr)


def run_compare_programs_together(program: Path, ray_python: Path | str) -> tuple[dict, dict]:
    """Runs a program of ``tests/tools`` on Ember and on Ray at the same time; returns
    (Ember's output, Ray's output). Only for programs whose cases measure no speed: both
    runtimes then share the cores, which slows each, but changes none of their answers."""
    with ray_alone():
        return _run_together(program, ray_python)


def _run_together(program: Path, ray_python: Path | str) -> tuple[dict, dict]:
    procs = {
        runtime: subprocess.Popen(
            [str(python), str(program), runtime],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_compare_env(),
            cwd=REPO_ROOT,
        )
        for runtime, python in (("ember", sys.executable), ("ray", ray_python))
    }
    # Each pipe is drained by its own thread so that neither child blocks on a full pipe
    # while the other is waited for.
    outputs: dict[str, tuple[str, str]] = {}

    def drain(runtime: str) -> None:
        try:
            outputs[runtime] = procs[runtime].communicate(timeout=300)
        except subprocess.TimeoutExpired:
            procs[runtime].kill()
            outputs[runtime] = procs[runtime].communicate()

    threads = [threading.Thread(target=drain, args=(r,)) for r in procs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ember, ray = (_compare_output(r, procs[r].returncode, *outputs[r]) for r in ("ember", "ray"))
    return ember, ray


class PeakRss:
    """The highest RSS of ``proc`` while the block runs, sampled every 20 ms in a thread."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc, self.peak, self._done = proc, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.02)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()


def sigkill_driver_when_ready(
    script: str, args: list[str], ready: str, check=None, env: dict | None = None
) -> None:
    """Runs ``python -c script *args`` (a driver), waits for its line ``ready``, runs
    ``check()`` (the driver still alive), then SIGKILLs it and reaps it."""

    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout.readline().strip() == ready, proc.stderr.read()
        if check is not None:
            check()
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@contextlib.contextmanager
def redis_server(directory: str):
    """A real ``redis-server`` on a free loopback port, its files in ``directory``, with the
    append-only file on (a write is in its log before Redis answers); yields its
    ``redis://`` URL and stops it (SIGTERM, then SIGKILL). Skips when it is not installed
    (``.ci/run`` installs it)."""
    import shutil

    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", directory]
    argv += ["--save", "", "--appendonly", "yes", "--daemonize", "no", "--protected-mode", "yes"]
    log = open(os.path.join(directory, "redis.log"), "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}"
    try:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)

        def answers() -> bool:
            assert proc.poll() is None, f"redis-server exited: see {directory}/redis.log"
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        wait_until(answers, timeout=20, message="redis-server to answer")
        client.close()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


HISTORY_NODE = "ab" * 14
HISTORY_TRACEBACK = (
    'Traceback (most recent call last):\n  File "job.py", line 3\nValueError: boom-in-history'
)


def write_history_session(root: str, name: str, t0: float) -> str:
    """A stopped session's history as a head's dashboard writes it: the head's agent, three
    samples from ``t0``, and a task that failed with ``HISTORY_TRACEBACK``."""
    from ember.dashboard.history_writer import HistoryWriter

    session = os.path.join(root, name)
    os.makedirs(os.path.join(session, "logs"))
    w = HistoryWriter(session, flush_s=60)
    info = {"node_ip": "127.0.0.1", "hostname": "h", "is_head": True, "session_dir": session}
    w.record("hello", {"node": HISTORY_NODE, "info": info})
    for i in range(3):
        sample = {"cpu_percent": 10.0 + i, "mem_used_bytes": 1 << 30, "mem_total_bytes": 4 << 30}
        msg = {"type": "metrics", "time": t0 + 2 * i, "sample": sample}
        w.record("agent", {"node": HISTORY_NODE, "msg": msg})
    task = "cd" * 12
    events = [
        [task, "PENDING_ARGS_AVAIL", t0, 0, {"name": "boom", "actor_id": None}],
        [task, "RUNNING", t0 + 0.1, 0, {"name": "boom", "pid": 4242}],
        [
            task,
            "FAILED",
            t0 + 0.2,
            0,
            {"name": "boom", "error": HISTORY_TRACEBACK, "error_type": "TASK_EXECUTION_EXCEPTION"},
        ],
    ]
    msg = {"type": "task_events", "job_id": "01000000", "events": events}
    w.record("agent", {"node": HISTORY_NODE, "msg": msg})
    w.close()
    return session


# Short membership timings so a node's death is noticed in seconds.
FAST_FAILURE_ENV = {"EMBER_HEARTBEAT_INTERVAL": "0.2", "EMBER_NODE_DEATH_TIMEOUT": "2"}


@contextlib.contextmanager
def head_and_far_node(store: int, far: float):
    """A head (1 CPU) and a second node with a ``far`` resource, each with a ``store``-byte
    object store, on this machine; stopped (with any driver connected) at the end."""
    import ember
    from ember.cluster_utils import Cluster

    if ember.is_initialized():
        ember.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": store},
        env=FAST_FAILURE_ENV,
    )
    try:
        cluster.add_node(num_cpus=1, resources={"far": far}, object_store_memory=store)
        yield cluster
    finally:
        if ember.is_initialized():
            ember.shutdown()
        cluster.shutdown()


# For tests that kill the GCS: a node silent for 5 s is dead, and every process waits up to
# 30 s for a GCS to come back.
GCS_RESTART_ENV = {
    "EMBER_HEARTBEAT_INTERVAL": "0.2",
    "EMBER_NODE_DEATH_TIMEOUT": "5",
    "EMBER_GCS_RECONNECT_TIMEOUT": "30",
}


def gcs_processes(root: str) -> list[psutil.Process]:
    """The GCS processes of the cluster under the temp root ``root``."""
    from ember.session_processes import find_ember_processes

    # The command line as found: asking again fails for one that exited since (a zombie).
    return [
        p for p in find_ember_processes(root) if "ember.gcs.server" in " ".join(p.info["cmdline"])
    ]


def kill_the_gcs(root: str) -> psutil.Process:
    """SIGKILLs the cluster's GCS and returns the one its head's raylet starts again."""
    [old] = gcs_processes(root)
    old.kill()
    old.wait(10)
    [new] = wait_until(
        lambda: [p for p in gcs_processes(root) if p.pid != old.pid],
        timeout=30,
        message="a new GCS",
    )
    return new


@contextlib.contextmanager
def gcs_restart_cluster(monkeypatch, head_cpus: float = 1):
    """A head with ``head_cpus`` CPUs and ``GCS_RESTART_ENV``'s timings, this process's
    reconnect timeout matching (it is the driver once ``cluster.connect()``); at the end
    the driver and the cluster stop, and no process of it may be left."""
    import ember
    from ember import config
    from ember.cluster_utils import Cluster
    from ember.session_processes import find_ember_processes

    monkeypatch.setattr(config, "gcs_reconnect_timeout", 30.0)
    if ember.is_initialized():
        ember.shutdown()
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": head_cpus}, env=GCS_RESTART_ENV
    )
    root = cluster.temp_root
    try:
        yield cluster
    finally:
        if ember.is_initialized():
            ember.shutdown()
        cluster.shutdown()
    wait_until(lambda: not find_ember_processes(root), timeout=20, message="no leftovers")


def api_get(http, path: str, **params):
    """``GET path`` on an ``httpx.Client``: its JSON, failing the test on any other status."""
    r = http.get(path, params=params)
    assert r.status_code == 200, (path, r.status_code, r.text)
    return r.json()


def failed_task(http, name: str) -> dict | None:
    """The detail of the first FAILED task whose name ends with ``name``, if any yet."""
    rows = api_get(http, "/api/tasks", filter="state=FAILED")["items"]
    rows = [t for t in rows if t.get("name", "").endswith(name)]
    return api_get(http, f"/api/tasks/{rows[0]['task_id']}") if rows else None


@contextlib.contextmanager
def history_server(path: str):
    """``ember dashboard --history PATH`` on a free port; yields ``(url, first line)``; stopped
    with SIGTERM at the end, which it must answer by exiting 0."""
    server = subprocess.Popen(
        [ember_cli(), "dashboard", "--history", path, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()
        assert " at http://127.0.0.1:" in line, (line, server.stderr.read())
        yield line.rsplit(" at ", 1)[1].strip(), line
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)
            raise
    assert code == 0, server.stderr.read()
    assert not psutil.pid_exists(server.pid) or psutil.Process(server.pid).status() == "zombie"


def kill_soon(pid: int, after: float) -> threading.Thread:
    """SIGKILLs ``pid`` ``after`` seconds from now, from a thread (joined by the caller): the
    process dies while the test's own thread is blocked in a call it is serving."""

    def kill() -> None:
        time.sleep(after)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # gone already: the test's assertions say whether that was expected

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def own_channel_driver(**settings: Any):
    """A driver of its own node (2 CPUs) with threads' own reply channels on and ``settings``
    (``ember.config`` names) set for its life; yields its ``OwnReplies``; stops the node and
    checks no process of it is left."""
    import ember
    from ember import config, global_state

    settings = {"own_reply_channel": True, **settings}
    saved = {name: getattr(config, name) for name in settings}
    if ember.is_initialized():
        ember.shutdown()
    for name, value in settings.items():
        setattr(config, name, value)
    try:
        ember.init(num_cpus=2)
        own = global_state.worker.own_replies
        assert own is not None
        yield own
    finally:
        for name, value in saved.items():
            setattr(config, name, value)
        ember.shutdown()
        assert_no_ember_children()
