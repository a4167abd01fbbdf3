"""The raylet's memory monitor on a real local node, without filling the machine: the
monitor reads its usage from a file (``EMBER_MEMORY_MONITOR_USAGE_FILE``, its test hook),
which the tests raise above the threshold and lower again. The tasks hold a little real
memory and wait on a gate file, so each test decides when they may end."""

from __future__ import annotations

import os
import time

import ember
import httpx
import psutil
import pytest
from ember import config
from ember.exceptions import ActorDiedError, OutOfMemoryError
from ember_test_utils import assert_no_ember_children, process_gone, wait_until

HIGH, LOW = "0.99", "0.10"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    if ember.is_initialized():
        ember.shutdown()
    tmp = tmp_path_factory.mktemp("oom")
    usage = tmp / "usage"
    usage.write_text(LOW)
    env = {
        "EMBER_MEMORY_MONITOR_USAGE_FILE": str(usage),
        "EMBER_MEMORY_USAGE_THRESHOLD": "0.9",
        "EMBER_MEMORY_MONITOR_REFRESH_MS": "250",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    # The owner's side (this driver): retry after 0.2 s, not Ray's 1 s, to keep tests short.
    saved_delay = config.task_oom_retry_delay_base_ms
    config.task_oom_retry_delay_base_ms = 200
    try:
        ctx = ember.init(num_cpus=3)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    http = httpx.Client(base_url=ctx.dashboard_url, timeout=30)
    raylet = _raylet_pid()
    yield {"usage": usage, "tmp": tmp, "http": http, "raylet": raylet, "session": ctx.session_dir}
    http.close()
    config.task_oom_retry_delay_base_ms = saved_delay
    ember.shutdown()
    assert_no_ember_children()


def _raylet_pid() -> int:
    me = psutil.Process()
    for p in me.children(recursive=True):
        if "ember.raylet.raylet" in " ".join(p.cmdline()):
            return p.pid
    raise AssertionError("no raylet among the driver's children")


@pytest.fixture
def gate(node, request):
    """A fresh gate (the tasks end once it exists) and usage back to low after the test."""
    path = node["tmp"] / f"gate-{request.node.name}"
    yield path
    node["usage"].write_text(LOW)
    path.touch()


def _hold(name: str, gate: str, started_dir: str) -> tuple[str, int]:
    """Holds 20 MB until the gate opens (60 s at most); says who ran it."""
    ballast = bytearray(20 * 1024 * 1024)
    with open(os.path.join(started_dir, f"{name}-{os.getpid()}"), "w"):
        pass
    deadline = time.monotonic() + 60
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    del ballast
    return name, os.getpid()


hold = ember.remote(_hold)


def _started(node, name: str, timeout: float = 30.0) -> int:
    """The pid of the latest worker that started task ``name``."""

    def pids():
        found = [
            int(f.rsplit("-", 1)[1]) for f in os.listdir(node["tmp"]) if f.startswith(name + "-")
        ]
        return [p for p in found if psutil.pid_exists(p)]

    return wait_until(pids, timeout, 0.01, f"task {name} to start")[-1]


def _kills() -> int:
    stats = ember.global_state.worker.call_raylet_sync("node_stats", None)
    return stats["memory_monitor"]["kills_total"]


def _kill_then_lower(node, pid: int) -> None:
    """Usage above the threshold until the monitor kills one worker, then low again at once:
    the monitor judges again only a refresh (250 ms) after its victim's exit is seen."""
    before = _kills()
    node["usage"].write_text(HIGH)
    wait_until(lambda: _kills() > before, 15, 0.005, "a kill")
    node["usage"].write_text(LOW)
    wait_until(lambda: process_gone(pid), 15, 0.01, f"the end of {pid}")


def _oom_events(node, name: str) -> list[dict]:
    r = node["http"].get("/api/events", params={"filter": "kind=WORKER_OOM_KILLED"})
    assert r.status_code == 200, r.text
    return [e for e in r.json()["items"] if f"task {name} " in e["message"]]


def _alive(node) -> None:
    """The node survived: the raylet runs and takes new work."""
    assert psutil.pid_exists(node["raylet"])
    (node["tmp"] / "open").touch()  # its gate (a test run alone has not opened it yet)
    assert ember.get(hold.remote("after", str(node["tmp"] / "open"), str(node["tmp"])), timeout=30)


def test_a_hog_without_retries_fails_with_out_of_memory_error_naming_itself(node, gate):
    (node["tmp"] / "open").touch()
    ref = hold.options(name="hog0", max_retries=0).remote("hog0", str(gate), str(node["tmp"]))
    pid = _started(node, "hog0")
    _kill_then_lower(node, pid)
    with pytest.raises(OutOfMemoryError) as e:
        ember.get(ref, timeout=30)
    text = str(e.value)
    node_id = ember.get_runtime_context().get_node_id()
    assert "hog0()" in text and node_id in text and "127.0.0.1" in text
    assert "threshold 0.9" in text and "(0.990" in text and "max_retries=0" in text
    assert "Biggest memory users" in text and f"pid {pid}" in text
    assert "memory= resource" in text and "EMBER_MEMORY_USAGE_THRESHOLD" in text
    # The dashboard's event says the same, and the raylet's log.
    event = wait_until(lambda: _oom_events(node, "hog0"), 15, 0.2, "the dashboard's event")[0]
    assert event["severity"] == "ERROR" and "fails with OutOfMemoryError" in event["message"]
    assert "Biggest memory users" in event["detail"]
    node_id_metrics = f"/api/nodes/{node_id}"
    wait_until(
        lambda: node["http"].get(node_id_metrics).json()["metrics"].get("oom_kills_total"),
        15,
        0.2,
        "the node's count of kills",
    )
    log = os.path.join(node["session"], "logs", "raylet.log")
    assert "running task hog0" in open(log).read()
    _alive(node)


def test_the_last_task_of_its_caller_fails_though_retriable(node, gate):
    # Run again, it would meet the same pressure alone: Ray's rule, so it cannot loop forever.
    ref = hold.options(name="lone", max_retries=3).remote("lone", str(gate), str(node["tmp"]))
    _kill_then_lower(node, _started(node, "lone"))
    with pytest.raises(OutOfMemoryError, match="only task its caller had running"):
        ember.get(ref, timeout=30)


def test_the_newest_retriable_task_is_killed_and_retried(node, gate):
    tmp = str(node["tmp"])
    older = hold.options(name="older").remote("older", str(gate), tmp)
    older_pid = _started(node, "older")
    newer = hold.options(name="newer").remote("newer", str(gate), tmp)
    newer_pid = _started(node, "newer")
    _kill_then_lower(node, newer_pid)
    retried_pid = wait_until(
        lambda: (p := _started(node, "newer")) != newer_pid and p, 30, 0.05, "the retry"
    )
    gate.touch()
    assert ember.get(older, timeout=30) == ("older", older_pid)  # never killed
    assert ember.get(newer, timeout=30) == ("newer", retried_pid)
    event = wait_until(lambda: _oom_events(node, "newer"), 15, 0.2, "the event")[0]
    assert "will be retried" in event["message"]
    assert not _oom_events(node, "older")
    _alive(node)


def test_a_retriable_task_goes_before_a_newer_one_without_retries(node, gate):
    tmp = str(node["tmp"])
    retriable = hold.options(name="retriable", max_retries=1).remote("retriable", str(gate), tmp)
    r_pid = _started(node, "retriable")
    fragile = hold.options(name="fragile", max_retries=0).remote("fragile", str(gate), tmp)
    f_pid = _started(node, "fragile")
    _kill_then_lower(node, r_pid)
    retried = wait_until(lambda: (p := _started(node, "retriable")) != r_pid and p, 30, 0.05)
    gate.touch()
    assert ember.get(fragile, timeout=30) == ("fragile", f_pid)
    # Its OOM retry did not use its one max_retries: that budget is the crashes'.
    assert ember.get(retriable, timeout=30) == ("retriable", retried)


@ember.remote(max_restarts=0)
class Holder:
    def run(self, gate: str, started_dir: str) -> tuple[str, int]:
        return _hold("actor", gate, started_dir)


def test_an_actor_killed_by_the_monitor_dies_with_that_cause(node, gate):
    actor = Holder.remote()
    ref = actor.run.remote(str(gate), str(node["tmp"]))
    _kill_then_lower(node, _started(node, "actor"))
    with pytest.raises(ActorDiedError, match="memory monitor"):
        ember.get(ref, timeout=30)
    _alive(node)


def _grow(step_mb: int, max_mb: int) -> int:
    """Allocates (and touches) ``step_mb`` more every 50 ms up to ``max_mb``, then holds it."""
    chunks = []
    while len(chunks) * step_mb < max_mb:
        chunks.append(bytearray(step_mb * 1024 * 1024))  # zero-filled: every page touched
        time.sleep(0.05)
    time.sleep(30)
    return len(chunks)


grow = ember.remote(max_retries=0)(_grow)


def test_real_memory_a_hog_is_killed_before_it_takes_much(ember_start, monkeypatch):
    """No test hook: the threshold is put 500 MB above the machine's use now, and a task
    grows toward 2.5 GB (far below what this machine has free) until the monitor kills it.
    (500, not less: the node's own processes start after the reading, other tests may run
    beside this one, and the raylet starts no worker within 128 MiB of the threshold; at
    200 MB a fresh-clone run once left the task waiting for a worker that never started.
    2.5 GB, not 1: other tests' processes ending meanwhile lower the machine's use, and a
    fresh-clone run once saw the task reach 1 GB and return, never past the threshold.)"""
    from ember.raylet.memory_monitor import UsageReader

    if ember.is_initialized():
        ember.shutdown()
    monkeypatch.delenv("EMBER_MEMORY_MONITOR_USAGE_FILE", raising=False)
    monkeypatch.setenv("EMBER_MEMORY_MONITOR_REFRESH_MS", "100")
    reading = UsageReader().read()
    if reading.total - reading.used < 5 * 1024**3:
        pytest.skip("less than 5 GiB free: not growing a task toward 2.5 GiB here")
    threshold = (reading.used + 500 * 1024**2) / reading.total
    monkeypatch.setenv("EMBER_MEMORY_USAGE_THRESHOLD", f"{threshold:.6f}")
    ember_start(num_cpus=1, include_dashboard=False)
    with pytest.raises(OutOfMemoryError, match=r"_grow\(\).*max_retries=0"):
        ember.get(grow.remote(50, 2560), timeout=60)
    # The node lives on. (No new task here: with the threshold this close, another user of
    # this machine growing by a few hundred MB would get it killed too.)
    assert psutil.pid_exists(_raylet_pid())
    assert _kills() >= 1  # the raylet answers, and counted it
