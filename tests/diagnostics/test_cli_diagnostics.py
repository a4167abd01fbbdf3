"""The diagnostics commands run as a user runs them: ``ember ...`` subprocesses against a
live local node and its dashboard (issue 4 §4 and §6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import ember
import pytest
from ember_test_utils import wait_until

EMBER = os.path.join(os.path.dirname(sys.executable), "ember")
pytestmark = pytest.mark.timeout(240)


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([EMBER, *args], capture_output=True, text=True, timeout=timeout)


@ember.remote
def square(x):
    return x * x


@ember.remote
def boom():
    raise ValueError("expected failure")


@ember.remote
def slow_marker(seconds):
    print("slow-marker-started", flush=True)
    time.sleep(seconds)
    return 1


@ember.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n

    def shout(self, text):
        print(text, flush=True)
        return text

    def complain(self, text):
        print(text, file=sys.stderr, flush=True)
        return text


@pytest.fixture(scope="module")
def cluster():
    """One node for the module's read-only commands, with some history: tasks (one
    failed), a named actor, an object."""
    if ember.is_initialized():
        ember.shutdown()
    ctx = ember.init(num_cpus=2)
    assert ember.get([square.remote(i) for i in range(5)]) == [0, 1, 4, 9, 16]
    with pytest.raises(ember.exceptions.RayTaskError):
        ember.get(boom.remote())
    actor = Counter.options(name="diag-counter").remote()
    assert ember.get(actor.incr.remote()) == 1
    held = ember.put(b"x" * 300_000)
    url = ctx.dashboard_url

    def tasks_arrived() -> bool:
        out = run("summary", "tasks", "--address", url, "--format", "json")
        return out.returncode == 0 and json.loads(out.stdout)["cluster"]["total_tasks"] >= 6

    wait_until(tasks_arrived, timeout=30, interval=0.3, message="the tasks on the dashboard")
    yield ctx, actor, held
    ember.shutdown()


def test_list_with_filters_limit_and_formats(cluster):
    ctx, actor, _ = cluster
    url = ctx.dashboard_url
    out = run("list", "tasks", "--filter", "state=FINISHED", "--limit", "2", "--address", url)
    assert out.returncode == 0, out.stderr
    header = next(line for line in out.stdout.splitlines() if "TASK_ID" in line)
    assert header.split()[:4] == ["TASK_ID", "ATTEMPT_NUMBER", "NAME", "STATE"]
    assert "Total: 2 of 7 matching" in out.stdout  # 5 squares, the actor's creation and call
    failed = json.loads(
        run(
            "list", "tasks", "--filter", "state=FAILED", "--format", "json", "--address", url
        ).stdout
    )
    assert [t["name"].rsplit(".", 1)[-1] for t in failed] == ["boom"]
    assert failed[0]["error_type"]
    actors = json.loads(run("list", "actors", "--format", "json", "--address", url).stdout)
    assert [(a["name"], a["state"], a["class_name"]) for a in actors] == [
        ("diag-counter", "ALIVE", "Counter")
    ]
    nodes = json.loads(run("list", "nodes", "--format", "json", "--address", url).stdout)
    assert [n["node_id"] for n in nodes] == [ctx.node_id]
    workers = json.loads(
        run(
            "list",
            "workers",
            "--filter",
            "worker_type=DRIVER",
            "--format",
            "json",
            "--address",
            url,
        ).stdout
    )
    assert [w["pid"] for w in workers] == [os.getpid()]
    objects = run("list", "objects", "--address", url)
    assert "LOCAL_REFERENCE" in objects.stdout and "ACTOR_HANDLE" in objects.stdout
    # Bad input: a clear one-line error naming the field, not a traceback.
    bad = run("list", "tasks", "--filter", "colour=red", "--address", url)
    assert bad.returncode == 2 and "colour" in bad.stderr and "Traceback" not in bad.stderr
    assert run("list", "tasks", "--filter", "oops", "--address", url).returncode == 2


def test_summary_tasks_and_actors(cluster):
    ctx, _, _ = cluster
    tasks = run("summary", "tasks", "--address", ctx.dashboard_url)
    assert tasks.returncode == 0, tasks.stderr
    # Named as Ray names tasks: the function, without its module.
    square_line = next(line for line in tasks.stdout.splitlines() if " square " in line)
    assert square_line.split()[1:5] == ["square", "NORMAL_TASK", "5", "5"]  # type, total, FINISHED
    assert "FAILED" in tasks.stdout
    actors = json.loads(
        run("summary", "actors", "--format", "json", "--address", ctx.dashboard_url).stdout
    )
    assert actors["cluster"]["summary"] == {
        "Counter": {"class_name": "Counter", "state_counts": {"ALIVE": 1}}
    }


def test_dashboard_and_address_resolution(cluster):
    ctx, _, _ = cluster
    # The cluster's (GCS) address leads to the dashboard through the GCS.
    out = run("dashboard", "--address", ctx.address)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ctx.dashboard_url
    nothing = run("dashboard", "--address", "http://127.0.0.1:9")
    assert nothing.returncode == 1
    assert "could not reach the dashboard at http://127.0.0.1:9" in nothing.stderr


def test_timeline_writes_a_trace(cluster, tmp_path):
    ctx, _, _ = cluster
    path = tmp_path / "trace.json"
    out = run("timeline", "--output", str(path), "--address", ctx.dashboard_url)
    assert out.returncode == 0, out.stderr
    assert f"Trace file written to {path}" in out.stdout
    events = json.loads(path.read_text())
    names = {e["name"].rsplit(".", 1)[-1] for e in events if e.get("cat", "").startswith("task::")}
    assert {"square", "boom", "incr"} <= names
    job = run("timeline", "-o", str(path), "--job", "ffff", "--address", ctx.dashboard_url)
    assert "(0 tasks" in job.stdout
    recent = run("timeline", "-o", str(path), "--since", "3600", "--address", ctx.dashboard_url)
    assert "(0 tasks" not in recent.stdout
    unknown = run("timeline", "-o", str(path), "--node", "feedface", "--address", ctx.dashboard_url)
    assert unknown.returncode == 1 and "no node 'feedface'" in unknown.stderr


def test_logs_list_tail_and_follow(cluster):
    ctx, actor, _ = cluster
    url = ctx.dashboard_url
    listing = run("logs", "--address", url)
    assert listing.returncode == 0, listing.stderr
    assert "raylet.log" in listing.stdout and "worker-" in listing.stdout
    assert ember.get(actor.shout.remote("hello-from-the-actor")) == "hello-from-the-actor"
    pid = json.loads(run("list", "actors", "--format", "json", "--address", url).stdout)[0]["pid"]

    def actor_log() -> str | None:
        out = run("logs", "--actor", "diag-counter", "--tail", "20", "--address", url)
        return out.stdout if "hello-from-the-actor" in out.stdout else None

    text = wait_until(actor_log, timeout=30, interval=0.5, message="the actor's line in its log")
    assert f"-{pid}.out" in text
    only_out = run("logs", f"worker-*-{pid}.out", "--tail", "5", "--address", url)
    assert "hello-from-the-actor" in only_out.stdout
    none = run("logs", "no-such-file*", "--address", url)
    assert none.returncode == 1 and "no log file matches no-such-file*" in none.stderr
    # --follow prints lines written after it started, until stopped: an actor's worker has
    # two files (.out and .err), both followed, each line marked with its file.
    follower = subprocess.Popen(
        [EMBER, "logs", "--actor", "diag-counter", "--follow", "--tail", "1", "--address", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(follower.stdout), daemon=True)
    reader.start()
    try:

        def followed() -> bool:
            # A new line each round: the follower may have started after the previous one.
            ember.get(actor.shout.remote("a-line-while-following"))
            ember.get(actor.complain.remote("an-error-while-following"))
            lines = list(seen)
            return any(f"-{pid}.out] a-line-while-following" in line for line in lines) and any(
                f"-{pid}.err] an-error-while-following" in line for line in lines
            )

        wait_until(followed, timeout=30, interval=0.5, message="the followed line")
    finally:
        follower.terminate()
        follower.wait(timeout=10)
        reader.join(timeout=10)


def test_logs_format_json_and_rotated_files_by_pid(cluster):
    ctx, actor, _ = cluster
    url = ctx.dashboard_url
    pid = json.loads(run("list", "actors", "--format", "json", "--address", url).stdout)[0]["pid"]
    live = next(
        f
        for f in json.loads(run("logs", "--format", "json", "--address", url).stdout)
        if f["pid"] == pid and f["stream"] == "out"
    )
    assert live["component"] == "worker" and live["rotated"] is None and live["node_id"]
    # A rotated copy beside it (as logrotate leaves one) belongs to the same worker.
    rotated = os.path.join(ctx.session_dir, "logs", live["name"] + ".1")
    with open(rotated, "w") as f:
        f.write("a-line-from-before-the-rotation\n")
    try:

        def tails() -> list | None:
            out = run("logs", "--pid", str(pid), "--format", "json", "--address", url)
            rows = json.loads(out.stdout) if out.returncode == 0 else []
            return rows if any(r["name"] == live["name"] + ".1" for r in rows) else None

        rows = wait_until(tails, timeout=30, interval=0.5, message="the rotated file by pid")
        old = next(r for r in rows if r["name"] == live["name"] + ".1")
        assert old["lines"] == ["a-line-from-before-the-rotation"]
        table = run("logs", "--format", "table", "--address", url).stdout
        assert "ROTATED" in table.splitlines()[0] and live["name"] + ".1" in table
        both = run("logs", "--actor", "diag-counter", "--format", "json", "--address", url)
        assert {r["name"] for r in json.loads(both.stdout)} >= {live["name"], old["name"]}
        bad = run("logs", "--format", "json", "--follow", "raylet.log", "--address", url)
        assert bad.returncode == 2 and "--follow prints lines as they come" in bad.stderr
    finally:
        os.unlink(rotated)


def _running_pid(address: str, task_id: str | None = None) -> int | None:
    """The pid of the worker running ``slow_marker`` now (that task, given its id), as
    ``ember list tasks`` says. The id matters: an earlier test's cancelled one may still read
    RUNNING for a moment, on a worker that is gone."""
    which = ["--filter", f"task_id={task_id}"] if task_id else []
    out = run(
        "list", "tasks", "--filter", "state=RUNNING", "--filter", "name=slow_marker",
        *which, "--format", "json", "--address", address,
    )  # fmt: skip
    rows = json.loads(out.stdout) if out.returncode == 0 else []
    return rows[0]["worker_pid"] if rows else None


def test_stack_shows_the_running_task(cluster):
    ctx, _, _ = cluster
    ref = slow_marker.remote(30)
    task_id = ref.task_id().hex()

    worker = {
        "pid": wait_until(
            lambda: _running_pid(ctx.dashboard_url, task_id),
            timeout=30,
            interval=0.3,
            message="RUNNING",
        )
    }
    out = run("stack", "--pid", str(worker["pid"]), "--address", ctx.dashboard_url)
    if "ptrace" in out.stdout + out.stderr and "Thread" not in out.stdout:
        pytest.skip(f"py-spy cannot attach here: {out.stdout}{out.stderr}")
    assert out.returncode == 0, out.stderr
    assert f"pid={worker['pid']}" in out.stdout and "running" in out.stdout
    assert "slow_marker" in out.stdout
    whole = json.loads(run("stack", "--format", "json", "--address", ctx.dashboard_url).stdout)
    kinds = {p["pid"]: p.get("kind") for n in whole["nodes"] for p in n["processes"]}
    assert worker["pid"] in kinds
    assert kinds.get(os.getpid()) == "driver"  # the driver's stack too, labelled as such
    ember.cancel(ref, force=True)


def test_kill_actor_by_name_then_again(ember_start):
    ctx = ember_start(num_cpus=1)
    victim = Counter.options(name="victim").remote()
    assert ember.get(victim.incr.remote()) == 1
    url = ctx.dashboard_url

    def listed() -> bool:
        out = run("list", "actors", "--filter", "name=victim", "--format", "json", "--address", url)
        return out.returncode == 0 and len(json.loads(out.stdout)) == 1

    wait_until(listed, timeout=30, interval=0.3, message="the actor on the dashboard")
    out = run("kill-actor", "victim", "--address", url)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("killed actor ")
    with pytest.raises(ember.exceptions.RayActorError):
        ember.get(victim.incr.remote(), timeout=30)

    def dead() -> dict | None:
        args = ["list", "actors", "--filter", "name=victim", "--detail", "--format", "json"]
        out = run(*args, "--address", url)
        row = json.loads(out.stdout)[0]
        return row if row["state"] == "DEAD" else None

    row = wait_until(dead, timeout=30, interval=0.3, message="the actor DEAD on the dashboard")
    # The death cause names the command that killed it, not the web page.
    said = row["death_cause"]["actor_died_error_context"]["error_message"]
    assert said == "killed with `ember kill-actor`"
    again = run("kill-actor", "victim", "--address", url)
    assert again.returncode == 0 and "is already dead" in again.stdout
    assert "killed with `ember kill-actor`" in again.stdout
    unknown = run("kill-actor", "nobody-by-this-name", "--address", url)
    assert unknown.returncode == 1 and "nobody-by-this-name" in unknown.stderr
    assert "Traceback" not in unknown.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping py-spy to 'nobody' needs root")
def test_stack_where_ptrace_is_denied_says_what_to_change(ember_start, tmp_path, monkeypatch):
    # A real denial, not a simulated message: the node's agent runs the real py-spy as the
    # user 'nobody' (EMBER_PYSPY names the wrapper), which may not trace the root-owned workers.
    from ember.agent import pyspy

    wrapper = tmp_path / "py-spy-as-nobody"
    wrapper.write_text(
        "#!/bin/sh\nexec setpriv --reuid=nobody --regid=nogroup --clear-groups "
        f'{pyspy.pyspy_path()} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv(pyspy.ENV, str(wrapper))  # the agent inherits the driver's environment
    ctx = ember_start(num_cpus=1)
    ref = slow_marker.remote(30)
    url = ctx.dashboard_url

    pid = wait_until(lambda: _running_pid(url), timeout=30, interval=0.3, message="RUNNING")
    out = run("stack", "--pid", str(pid), "--address", url)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"py-spy may not trace pid {pid}" in out.stdout
    assert "--cap-add SYS_PTRACE" in out.stdout  # what to change
    assert "Traceback" not in out.stderr
    ember.cancel(ref, force=True)
