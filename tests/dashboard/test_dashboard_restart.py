"""The head's dashboard, and with it the head's agent, is started again when it dies
(``core/raylet/dashboard_supervisor.py``, in the raylet): on the same URL, within the restart
budget the agent has; a port taken meanwhile is reported and retried; tasks never notice."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys

import ember
import httpx
import psutil
import pytest
from ember.dashboard.history_format import records, segments
from ember.launch import bind_port
from ember.raylet import child_supervisor
from ember.raylet.dashboard_supervisor import DashboardSupervisor
from ember_test_utils import (
    COUNTER_SOURCE,
    assert_no_ember_children,
    dashboard_url_in,
    fake_spawn,
    free_port,
    head_cluster,
    wait_for_node_agents,
    wait_until,
)


def _dashboards(root: psutil.Process | None = None, session: str = "") -> list[int]:
    """Live (not zombie) dashboard processes: under ``root`` or, for a daemon cluster, any
    whose command line names ``session``."""
    procs = root.children(recursive=True) if root is not None else psutil.process_iter()
    out = []
    for p in procs:
        try:
            cmd = " ".join(p.cmdline())
            if p.status() == psutil.STATUS_ZOMBIE or "ember.dashboard.server" not in cmd:
                continue
        except psutil.Error:
            continue
        if session in cmd:
            out.append(p.pid)
    return out


def _serving(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/version", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@ember.remote
def plus_one(x: int) -> int:
    return x + 1


def _finished_in_history(session_dir: str) -> int:
    """Task ends written to the session's history so far."""
    n = 0
    for _, path in segments(os.path.join(session_dir, "history")):
        for rec in records(path):
            if rec and rec[1] == "agent" and rec[2]["msg"]["type"] == "task_events":
                n += sum(e[1] == "FINISHED" for e in rec[2]["msg"]["events"])
    return n


def _tasks_in_history(session_dir: str, name_suffix: str, state: str) -> int:
    """The tasks of the function whose name ends with ``name_suffix`` that have a ``state``
    event in the session's history so far (a task's name comes with its RUNNING event)."""
    names: dict[str, str] = {}
    states: dict[str, set[str]] = {}
    for _, path in segments(os.path.join(session_dir, "history")):
        for rec in records(path):
            if rec and rec[1] == "agent" and rec[2]["msg"]["type"] == "task_events":
                for task_id, st, _t, _attempt, extra in rec[2]["msg"]["events"]:
                    if extra and extra.get("name"):
                        names[task_id] = extra["name"]
                    states.setdefault(task_id, set()).add(st)
    return sum(state in states[t] for t, name in names.items() if name.endswith(name_suffix))


def _in_history(session_dir: str, kind: str) -> int:
    """The agent messages of ``kind`` written to the session's history so far."""
    n = 0
    for _, path in segments(os.path.join(session_dir, "history")):
        for rec in records(path):
            n += bool(rec and rec[1] == "agent" and rec[2]["msg"]["type"] == kind)
    return n


def test_a_killed_dashboard_comes_back_on_its_url_with_the_heads_agent():
    if ember.is_initialized():
        ember.shutdown()
    ctx = ember.init(num_cpus=1, dashboard_port=0)
    http = httpx.Client(base_url=ctx.dashboard_url, timeout=10)
    try:
        wait_for_node_agents(ctx.dashboard_url)
        assert ember.get([plus_one.remote(i) for i in range(20)], timeout=60) == list(range(1, 21))
        # The session's history has their ends (written within a second)...
        wait_until(
            lambda: _finished_in_history(ctx.session_dir) >= 20, 30, 0.2, "20 ends in the history"
        )
        me = psutil.Process()
        [first] = wait_until(lambda: _dashboards(me), 15, 0.1, "the dashboard process")
        os.kill(first, signal.SIGKILL)
        # Tasks do not depend on the dashboard: one runs while it is down.
        assert ember.get(plus_one.remote(1), timeout=30) == 2
        [second] = wait_until(
            lambda: [p for p in _dashboards(me) if p != first], 30, 0.1, "a new dashboard"
        )
        wait_until(
            lambda: _serving(ctx.dashboard_url), 30, 0.1, "the dashboard to serve on its URL again"
        )
        # The head's agent lives in the new process: the node is reported by it again.
        wait_for_node_agents(ctx.dashboard_url)
        assert http.get("/api/nodes").json()["items"][0]["state"] == "ALIVE"
        # ...so the new dashboard carries on from them: the task history survived.
        summary = http.get("/api/tasks/summary").json()
        ran = [f for f in summary["by_function"] if f["name"].endswith("plus_one")]
        assert ran and ran[0]["states"].get("FINISHED", 0) >= 20, summary
        log = open(os.path.join(ctx.session_dir, "logs", "raylet.log")).read()
        assert f"the dashboard (pid {first}) exited" in log
        assert f"restarted the dashboard (pid {second})" in log
    finally:
        http.close()
        ember.shutdown()
    assert_no_ember_children()


# A driver that kills its node's dashboard, waits for the raylet's new one, prints its pid
# and then blocks (the test SIGKILLs it).
_DRIVER = """
import os, signal, sys, time
import ember, psutil

def dashboards():
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "ember.dashboard.server" in " ".join(p.cmdline()):
                out.append(p.pid)
        except psutil.Error:
            pass
    return out

def wait_for(pred, what):
    deadline = time.monotonic() + 30
    while not (value := pred()):
        if time.monotonic() > deadline:
            sys.exit("timed out waiting for " + what)
        time.sleep(0.05)
    return value

ember.init(num_cpus=1, dashboard_port=0)
[first] = wait_for(dashboards, "the dashboard")
os.kill(first, signal.SIGKILL)
[second] = wait_for(lambda: [p for p in dashboards() if p != first], "a new dashboard")
print(second, flush=True)
sys.stdin.readline()
"""


def test_a_restarted_dashboard_goes_away_with_a_sigkilled_driver():
    import select
    import time

    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        readable, _, _ = select.select([driver.stdout], [], [], 90)
        assert readable, "the driver printed nothing in 90 s"
        line = driver.stdout.readline().strip()
        assert line.isdigit(), (line, driver.stderr.read() if driver.poll() is not None else "")
        second = psutil.Process(int(line))
        driver.kill()
        driver.wait(10)

        def gone() -> bool:
            try:
                return second.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        deadline = time.monotonic() + 15
        while not gone():
            assert time.monotonic() < deadline, "the restarted dashboard outlived its driver"
            time.sleep(0.05)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(10)


def _kill_the_dashboard(root: str, url: str) -> None:
    """SIGKILLs the dashboard of the ``ember start`` cluster under ``root``; returns once a
    new one serves on ``url``. Serving means restored: the new dashboard replays the
    session's history before it starts serving (``server.serve``), and a request sent earlier
    waits in the listening socket's backlog, which the raylet bound."""
    [first] = wait_until(lambda: _dashboards(session=root), 15, 0.1, "the dashboard")
    os.kill(first, signal.SIGKILL)
    wait_until(
        lambda: [p for p in _dashboards(session=root) if p != first],
        30,
        0.1,
        "a new dashboard",
    )
    wait_until(lambda: _serving(url), 30, 0.1, "the dashboard to serve on its URL again")


def test_an_ember_start_head_restarts_its_dashboard_and_ember_stop_ends_it():
    # A port of its own, not the default 8265 or the next free after it: under a parallel
    # suite another test's node can take the dead dashboard's port (8265 + n) within the
    # restart's delay, and the raylet restarts it on that exact port only (the likely cause
    # of the one time no new dashboard came within 30 s, in a fresh-clone run).
    with head_cluster("--dashboard-port", str(free_port())) as (root, _port, head):
        url = dashboard_url_in(head.stdout)
        wait_for_node_agents(url)
        _kill_the_dashboard(root, url)
        wait_for_node_agents(url)
    # head_cluster's `ember stop` checked that nothing of the cluster is left, the new
    # dashboard included.


def _supervisor(tmp_path, monkeypatch, port: int, code: str | None):
    """A supervisor whose first dashboard is already gone; ``code`` replaces the dashboard
    (None: the real ``_spawn``)."""
    os.makedirs(tmp_path / "logs", exist_ok=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    spec = {"argv": [], "host": "127.0.0.1", "port": port, "pid": gone.pid}
    sup = DashboardSupervisor(spec, str(tmp_path))
    spawned = fake_spawn(monkeypatch, sup, code) if code is not None else []
    monkeypatch.setattr(child_supervisor, "POLL", 0.05)  # ChildSupervisor's poll
    return sup, spawned


def test_a_dashboard_that_keeps_dying_is_restarted_five_times_then_left_down(
    tmp_path, monkeypatch, caplog
):
    sup, spawned = _supervisor(tmp_path, monkeypatch, 0, "raise SystemExit(3)")
    with caplog.at_level(logging.INFO, logger="ember.raylet"):
        asyncio.run(asyncio.wait_for(sup._watch_loop(), 60))  # returns when it gives up
    assert len(spawned) == child_supervisor.MAX_RESTARTS
    assert sup.proc is None and all(p.wait(5) == 3 for p in spawned)
    assert "not restarting it" in caplog.text


def test_a_port_taken_meanwhile_is_reported_and_nothing_else_is_bound(
    tmp_path, monkeypatch, caplog
):
    taken, port = bind_port("127.0.0.1", 0)
    try:
        sup, _ = _supervisor(tmp_path, monkeypatch, port, None)

        async def run() -> None:
            sup.start()
            await asyncio.sleep(1.0)  # the first retry comes 0.5 s after the death
            await sup.stop()

        with caplog.at_level(logging.INFO, logger="ember.raylet"):
            asyncio.run(run())
        assert sup.proc is None
        assert f"could not restart the dashboard: port {port} on 127.0.0.1 is taken" in caplog.text
    finally:
        taken.close()


@pytest.mark.parametrize("exact", [True, False])
def test_bind_port_exact_or_the_next_free_one(exact):
    taken, port = bind_port("127.0.0.1", 0)
    try:
        if exact:
            with pytest.raises(OSError, match=f"port {port} on 127.0.0.1 is taken"):
                bind_port("127.0.0.1", port, exact=True)
        else:
            sock, other = bind_port("127.0.0.1", port)
            sock.close()
            assert other != port
    finally:
        taken.close()


def test_bind_port_moves_on_when_another_process_listens_first_on_the_port_it_bound(
    monkeypatch,
):
    """Two nodes starting at once both bind 8265 (SO_REUSEADDR allows it while no one
    listens); the one that listens second is refused, and takes the next port."""
    import socket as socket_mod

    import ember.launch

    rival = socket_mod.socket()
    rival.setsockopt(socket_mod.SOL_SOCKET, socket_mod.SO_REUSEADDR, 1)
    rival.bind(("127.0.0.1", 0))
    port = rival.getsockname()[1]

    class RivalListensFirst(socket_mod.socket):
        def bind(self, address):
            super().bind(address)
            if address[1] == port:
                rival.listen(1)  # between our bind and our listen

    monkeypatch.setattr(ember.launch.socket, "socket", RivalListensFirst)
    try:
        sock, got = bind_port("127.0.0.1", port)
        sock.close()
        assert got > port
    finally:
        rival.close()


# A driver of an `ember start` cluster: an actor holding state, a named detached actor, 30
# finished tasks and 2 still running when it says "ready"; after the gate, the running ones'
# results and the actors' next counts.
_WORKLOAD = (
    """
import os, sys, time, ember
ember.init(address=sys.argv[1], temp_dir=sys.argv[2], namespace="app")

"""
    + COUNTER_SOURCE
    + """
Counter = ember.remote(num_cpus=0)(Counter)

@ember.remote(num_cpus=0.1)
def plus_one(x):
    return x + 1

@ember.remote(num_cpus=0.1)
def slow(x, gate):
    while not os.path.exists(gate):
        time.sleep(0.05)
    return x * 10

holder = Counter.options(name="holder").remote()
keeper = Counter.options(name="keeper", lifetime="detached").remote()
print([ember.get(holder.inc.remote(), timeout=60) for _ in range(3)],
      ember.get(keeper.inc.remote(), timeout=60), flush=True)
assert ember.get([plus_one.remote(i) for i in range(30)], timeout=60) == list(range(1, 31))
running = [slow.remote(i, sys.argv[3]) for i in range(2)]
print("ready", flush=True)
print(ember.get(running, timeout=120), ember.get(holder.inc.remote(), timeout=60),
      ember.get(keeper.inc.remote(), timeout=60), flush=True)
ember.kill(keeper)
"""
)

# A job that writes half its log, waits for the gate, then writes the rest.
_JOB = """
import os, sys, time
for i in range(50):
    print(f"line {i}", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
for i in range(50, 100):
    print(f"line {i}", flush=True)
"""


def test_a_dashboard_killed_mid_workload_keeps_everything_it_showed(tmp_path):
    """The head's dashboard is SIGKILLed while tasks run, an actor holds state, a Jobs-API
    job runs and a named detached actor lives. Back on its port, it shows the same task
    history, the job RUNNING and then SUCCEEDED with its whole log (tailed across the end),
    the actors and the metrics history from before the kill."""
    from ember.job_submission import JobStatus, JobSubmissionClient
    from ember_test_utils import free_port

    dash_port = free_port()
    gate, job_gate = tmp_path / "gate", tmp_path / "job-gate"
    with head_cluster("--num-cpus", "2", "--dashboard-port", str(dash_port)) as (root, port, head):
        url = dashboard_url_in(head.stdout)
        assert url.endswith(f":{dash_port}"), url
        http = httpx.Client(base_url=url, timeout=30)
        wait_for_node_agents(url)
        client = JobSubmissionClient(url)
        program = tmp_path / "job.py"
        program.write_text(_JOB)
        sid = client.submit_job(entrypoint=f"python {program} {job_gate}")
        driver = subprocess.Popen(
            [sys.executable, "-c", _WORKLOAD, f"127.0.0.1:{port}", root, str(gate)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert driver.stdout.readline().strip() == "[1, 2, 3] 1", driver.stderr.read()
            assert driver.stdout.readline().strip() == "ready"
            wait_until(lambda: "line 49" in client.get_job_logs(sid), 60, 0.2, "the job's log")

            def finished() -> int:
                summary = http.get("/api/tasks/summary").json()["by_function"]
                return sum(
                    f["states"].get("FINISHED", 0)
                    for f in summary
                    if f["name"].endswith("plus_one")
                )

            def slow_running() -> int:
                summary = http.get("/api/tasks/summary").json()["by_function"]
                return sum(
                    f["states"].get("RUNNING", 0) for f in summary if f["name"].endswith("slow")
                )

            def actors() -> dict[str, str]:
                rows = http.get("/api/actors", params={"limit": 100}).json()["items"]
                return {a["name"]: a["state"] for a in rows if a.get("name")}

            def samples() -> list[dict]:
                return http.get("/api/history").json()["samples"]

            wait_until(lambda: finished() == 30, 30, 0.2, "30 finished tasks shown")
            wait_until(lambda: slow_running() == 2, 30, 0.2, "2 running tasks shown")
            wait_until(
                lambda: {"holder", "keeper"} <= {n for n, s in actors().items() if s == "ALIVE"},
                30,
                0.2,
                "the actors shown",
            )
            before = wait_until(lambda: (s := samples()) and len(s) >= 5 and s, 60, 0.5, "samples")
            # What the dashboard showed is in the session's history (written every second):
            # the very tasks and states shown, not just some records. A SIGKILL loses what was
            # not written yet (the new dashboard says so, below); counting any task events or
            # as many metrics records as samples passed with the last second still queued,
            # and the new dashboard then rightly showed 0 of the 30 ends.
            session = head.stdout.split("; session ", 1)[1].split()[0]
            wait_until(
                lambda: (
                    _in_history(session, "metrics") >= len(before)
                    and _tasks_in_history(session, "plus_one", "FINISHED") == 30
                    and _tasks_in_history(session, "slow", "RUNNING") == 2
                ),
                30,
                0.2,
                "the tasks and samples shown written to the history",
            )
            assert client.get_job_status(sid) == JobStatus.RUNNING

            _kill_the_dashboard(root, url)
            # Everything it showed is there again.
            assert finished() == 30
            assert slow_running() == 2
            assert {"holder", "keeper"} <= {n for n, s in actors().items() if s == "ALIVE"}
            after = samples()
            assert {s["time"] for s in before} <= {s["time"] for s in after}, (before, after)
            assert client.get_job_status(sid) == JobStatus.RUNNING
            assert "line 49" in client.get_job_logs(sid)
            # It says that the one before it was killed, so its last records may be missing.
            events = http.get("/api/events", params={"limit": 1000}).json()["items"]
            assert any(
                e["kind"] == "HISTORY_GAP" and "died without closing" in e["message"]
                for e in events
            ), events

            # The job's log tail works on the new dashboard and ends with the job.
            async def tail() -> str:
                chunks = []
                async for chunk in client.tail_job_logs(sid):
                    chunks.append(chunk)
                    if len(chunks) == 1:
                        job_gate.touch()
                return "".join(chunks)

            tailed = asyncio.run(asyncio.wait_for(tail(), 90))
            assert client.get_job_status(sid) == JobStatus.SUCCEEDED
            want = "".join(f"line {i}\n" for i in range(100))
            assert tailed == want and client.get_job_logs(sid) == want

            # The workload carries on; the new dashboard sees its tasks end.
            gate.touch()
            assert driver.stdout.readline().strip() == "[0, 10] 4 2", driver.stderr.read()
            assert driver.wait(30) == 0
            wait_until(lambda: slow_running() == 0, 30, 0.2, "the running tasks' ends")
        finally:
            if driver.poll() is None:
                driver.kill()
            driver.communicate()
            http.close()
