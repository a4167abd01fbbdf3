"""Task and actor lifecycles as users read them, on a real node: a task running now is
RUNNING on every surface (Ember's REST, Ray's state API and its summary, the CLI, /metrics,
the timeline) and then FINISHED; a failed task carries Ray's error type, its message and
traceback and its execute phase; an actor's creation task is a task. (Drivers that die, and
many drivers at once: ``tests/cluster/test_task_truth_drivers.py``.)"""

from __future__ import annotations

import json
import os
import subprocess

import ember
import httpx
import psutil
import pytest
from ember_test_utils import assert_no_ember_children, ember_cli, wait_until


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    if ember.is_initialized():
        ember.shutdown()
    old = os.environ.get("EMBER_DASHBOARD_JOB_END_GRACE")
    os.environ["EMBER_DASHBOARD_JOB_END_GRACE"] = "1"  # the dashboard process reads it
    ctx = ember.init(num_cpus=2, dashboard_port=0)
    http = httpx.Client(base_url=ctx.dashboard_url, timeout=60)
    try:
        yield ctx, http, tmp_path_factory.mktemp("gates")
    finally:
        http.close()
        ember.shutdown()
        if old is None:
            os.environ.pop("EMBER_DASHBOARD_JOB_END_GRACE", None)
        else:
            os.environ["EMBER_DASHBOARD_JOB_END_GRACE"] = old
        assert_no_ember_children()


@ember.remote
def held(gate: str) -> int:
    """Runs until ``gate`` exists."""
    import time

    while not os.path.exists(gate):
        time.sleep(0.02)
    return os.getpid()


@ember.remote
def boom() -> None:
    raise ValueError("kaboom from boom")


@ember.remote
class Keeper:
    def __init__(self, start: int) -> None:
        self.n = start

    def get(self) -> int:
        return self.n


@ember.remote
class Broken:
    def __init__(self) -> None:
        raise RuntimeError("constructor refused")

    def get(self) -> int:
        return 0


def v0_tasks(http: httpx.Client, **filters: str) -> list[dict]:
    params = [("detail", "true"), ("limit", "1000")]
    for k, v in filters.items():
        params += [("filter_keys", k), ("filter_predicates", "="), ("filter_values", v)]
    body = http.get("/api/v0/tasks", params=params).json()
    assert body["result"], body
    return body["data"]["result"]["result"]


def one_task(http: httpx.Client, task_id: str) -> dict | None:
    rows = v0_tasks(http, task_id=task_id)
    return rows[0] if rows else None


def trace_slice(http: httpx.Client, task_id: str) -> tuple[dict | None, list[dict]]:
    events = http.get("/api/timeline").json()
    task = next(
        (
            e
            for e in events
            if e.get("cat", "").startswith("task::") and e["args"]["task_id"] == task_id
        ),
        None,
    )
    if task is None:
        return None, []
    phases = [
        e
        for e in events
        if e.get("cat") in ("task:deserialize_arguments", "task:execute", "task:store_outputs")
        and (e["pid"], e["tid"]) == (task["pid"], task["tid"])
        and task["ts"] <= e["ts"] <= task["ts"] + task["dur"]
    ]
    return task, phases


def metric(http: httpx.Client, family: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(f"{family}{{"):
            got = ",".join(sorted(line[line.index("{") + 1 : line.index("}")].split(",")))
            if got == want:
                return float(line.rsplit(" ", 1)[1])
    return None


def cli_tasks(address: str, *filters: str) -> list[dict]:
    argv = [ember_cli(), "list", "tasks", "--address", address, "--format", "json"]
    for f in filters:
        argv += ["--filter", f]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_running_task_is_running_everywhere_then_finished(node):
    ctx, http, gates = node
    gate = str(gates / "running")
    ref = held.remote(gate)
    task_id = ref.task_id().hex()

    row = wait_until(
        lambda: (r := one_task(http, task_id)) and r["state"] == "RUNNING" and r,
        30,
        0.1,
        "the task RUNNING in the state API",
    )
    assert row["name"] == "held" and row["type"] == "NORMAL_TASK"
    assert row["start_time_ms"] and row["end_time_ms"] is None
    assert psutil.pid_exists(row["worker_pid"])
    # Ember's own REST, the summary, the CLI, /metrics and the timeline say the same.
    ours = http.get("/api/tasks", params={"filter": f"task_id={task_id}"}).json()["items"]
    assert [t["state"] for t in ours] == ["RUNNING"]
    summary = http.get("/api/v0/tasks/summarize").json()["data"]["result"]["result"]
    counts = summary["node_id_to_summary"]["cluster"]["summary"]["held"]["state_counts"]
    assert counts == {"RUNNING": 1}
    assert [t["state"] for t in cli_tasks(ctx.dashboard_url, f"task_id={task_id}")] == ["RUNNING"]
    assert metric(http, "ember_tasks", state="RUNNING", name="held") == 1.0
    task, _ = trace_slice(http, task_id)
    assert task is not None and task["args"]["state"] == "RUNNING" and task["name"] == "held"

    open(gate, "w").close()
    pid = ember.get(ref, timeout=30)
    row = wait_until(
        lambda: (r := one_task(http, task_id)) and r["state"] == "FINISHED" and r,
        30,
        0.1,
        "the task FINISHED",
    )
    assert row["worker_pid"] == pid and row["end_time_ms"] >= row["start_time_ms"]
    # Every transition, with its time, in order.
    events = row["events"]
    assert [e["state"] for e in events] == [
        "PENDING_ARGS_AVAIL",
        "PENDING_NODE_ASSIGNMENT",
        "SUBMITTED_TO_WORKER",
        "RUNNING",
        "FINISHED",
    ]
    times = [e["created_ms"] for e in events]
    assert times == sorted(times) and times[-1] == row["end_time_ms"]
    assert metric(http, "ember_tasks", state="RUNNING", name="held") is None
    assert [t["state"] for t in cli_tasks(ctx.dashboard_url, f"task_id={task_id}")] == ["FINISHED"]


@ember.remote
def where_task() -> tuple[int, str, str]:
    ctx = ember.get_runtime_context()
    return os.getpid(), ctx.get_worker_id(), ctx.get_node_id()


@ember.remote
class Where:
    def me(self) -> tuple[int, str, str]:
        ctx = ember.get_runtime_context()
        return os.getpid(), ctx.get_worker_id(), ctx.get_node_id()


@ember.remote
class WhereAsync:
    async def me(self) -> tuple[int, str, str]:
        ctx = ember.get_runtime_context()
        return os.getpid(), ctx.get_worker_id(), ctx.get_node_id()


def test_a_short_task_and_call_say_where_and_when_they_ran(node):
    """A task or call (of a plain or an async actor) that ends before its worker's next
    flush sends no RUNNING event of its own (its owner's end event carries the same facts):
    its row still names the worker, pid and node it ran on, and its RUNNING phase with its
    time."""
    _, http, _ = node
    actor = Where.remote()
    refs = {
        "task": where_task.remote(),
        "call": actor.me.remote(),
        "async call": WhereAsync.remote().me.remote(),
    }
    for kind, ref in refs.items():
        pid, worker_id, node_id = ember.get(ref, timeout=30)
        task_id = ref.task_id().hex()
        row = wait_until(
            lambda task_id=task_id: (
                (r := one_task(http, task_id)) and r["state"] == "FINISHED" and r
            ),
            30,
            0.1,
            f"the {kind} FINISHED",
        )
        assert (row["worker_pid"], row["worker_id"], row["node_id"]) == (pid, worker_id, node_id)
        events = {e["state"]: e["created_ms"] for e in row["events"]}
        assert "RUNNING" in events, (kind, row["events"])
        assert row["start_time_ms"] == events["RUNNING"] <= events["FINISHED"] == row["end_time_ms"]


def test_a_failed_task_carries_its_error_and_its_execute_phase(node):
    _, http, _ = node
    ref = boom.remote()
    with pytest.raises(ValueError, match="kaboom"):
        ember.get(ref, timeout=30)
    task_id = ref.task_id().hex()
    row = wait_until(
        lambda: (r := one_task(http, task_id)) and r["state"] == "FAILED" and r,
        30,
        0.1,
        "the task FAILED",
    )
    assert row["error_type"] == "TASK_EXECUTION_EXCEPTION"
    assert "ValueError: kaboom from boom" in row["error_message"]
    assert "Traceback" in row["error_message"]
    task, phases = trace_slice(http, task_id)
    assert task is not None and task["args"]["state"] == "FAILED"
    assert "task:execute" in [p["name"] for p in phases]


def test_actor_creation_tasks_are_tasks(node):
    _, http, _ = node
    keeper = Keeper.remote(7)
    assert ember.get(keeper.get.remote(), timeout=30) == 7
    actor_id = keeper._actor_id.hex()
    created = wait_until(
        lambda: [
            r
            for r in v0_tasks(http, actor_id=actor_id)
            if r["type"] == "ACTOR_CREATION_TASK" and r["state"] == "FINISHED"
        ],
        30,
        0.1,
        "the creation task FINISHED",
    )
    assert [r["name"] for r in created] == ["Keeper.__init__"]
    assert created[0]["start_time_ms"] <= created[0]["end_time_ms"]

    broken = Broken.remote()
    with pytest.raises(Exception, match="constructor refused"):
        ember.get(broken.get.remote(), timeout=30)
    failed = wait_until(
        lambda: [
            r
            for r in v0_tasks(http, actor_id=broken._actor_id.hex())
            if r["type"] == "ACTOR_CREATION_TASK" and r["state"] == "FAILED"
        ],
        30,
        0.1,
        "the failed creation task",
    )
    assert failed[0]["name"] == "Broken.__init__"
    assert "constructor refused" in failed[0]["error_message"]
