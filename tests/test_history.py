"""The session's history outlives the cluster: a cluster head runs a job (log lines, a failed
task with its traceback, a detached actor), is stopped with ``ember stop``, and
``ember dashboard --history <temp dir>`` serves what happened, read-only, through the same API.
Plus the writer's retention limits, which must report what they drop."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import httpx
import pytest
from ember.dashboard.history_format import records, segments
from ember.dashboard.history_writer import HistoryWriter, read_dropped
from ember_test_utils import (
    HISTORY_NODE,
    HISTORY_TRACEBACK,
    api_get,
    dashboard_url_in,
    ember_cli,
    failed_task,
    head_cluster,
    history_server,
    wait_until,
    write_history_session,
)

JOB = """
import ember

ember.init()

@ember.remote
def boom():
    raise ValueError("history-boom-42")

@ember.remote
class Keeper:
    def ping(self):
        return "pong"

k = Keeper.options(name="keeper", lifetime="detached").remote()
print("LOG-LINE", ember.get(k.ping.remote()), flush=True)
try:
    ember.get(boom.remote())
except Exception as e:
    print("caught", type(e).__name__, flush=True)
print("LOG-END", flush=True)
"""


@contextlib.contextmanager
def warnings_ignored():
    """FastAPI's TestClient warns on import (httpx's deprecations)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_history_of_a_stopped_cluster():
    with head_cluster(prefix="emb-hist-") as (root, _port, head):
        live = httpx.Client(base_url=dashboard_url_in(head.stdout), timeout=30)
        script = os.path.join(root, "job.py")
        with open(script, "w") as f:
            f.write(JOB)
        r = live.post("/api/jobs/", json={"entrypoint": f"{sys.executable} {script}"})
        assert r.status_code == 200, r.text
        sid = r.json()["submission_id"]

        def ended():
            job = api_get(live, f"/api/jobs/{sid}")
            return job if job["status"] in ("SUCCEEDED", "FAILED", "STOPPED") else None

        job = wait_until(ended, 90, 0.3, "the job to end")
        assert job["status"] == "SUCCEEDED", job
        # The dashboard has what the history must keep: the task's end, the actor, samples.
        wait_until(lambda: failed_task(live, "boom"), 30, 0.3, "the failed task on the dashboard")
        wait_until(lambda: len(api_get(live, "/api/history")["samples"]) >= 2, 30, 0.3, "2 samples")
        live.close()
        stop = subprocess.run(
            [ember_cli(), "stop", "--temp-dir", root], capture_output=True, text=True, timeout=90
        )
        assert stop.returncode == 0, stop.stderr
        sessions = [d for d in os.listdir(root) if d.startswith("session_") and "latest" not in d]
        assert len(sessions) == 1, sessions
        kept = segments(os.path.join(root, sessions[0], "history"))
        # The dashboard wrote out everything at `ember stop`: its last record says it stopped.
        last = [r for _, p in kept for r in records(p)][-1]
        assert last is not None and last[1] == "stop", last

        with history_server(root) as (url, _):
            _check_history(url, sid, sessions[0])


def _check_history(url: str, sid: str, session: str) -> None:
    http = httpx.Client(base_url=url, timeout=60)
    version = api_get(http, "/api/version")
    assert version["history"] is True
    assert version["session_name"] == session
    assert version["stopped_at"] > version["started"] > 0
    assert api_get(http, "/api/sessions")["sessions"][0]["session_name"] == session

    # The job: its status and its log lines, read from the head's logs directory.
    job = api_get(http, f"/api/jobs/{sid}")
    assert job["status"] == "SUCCEEDED"
    logs = api_get(http, f"/api/jobs/{sid}/logs")["logs"]
    assert "LOG-LINE pong\n" in logs and "caught" in logs and "LOG-END" in logs, logs
    # The page's tail WebSocket sends the whole log, then closes.
    from websockets.exceptions import ConnectionClosedOK
    from websockets.sync.client import connect

    tailed = ""
    with connect(url.replace("http://", "ws://").rstrip("/") + f"/api/jobs/{sid}/logs/tail") as ws:
        try:
            while True:  # each recv has a deadline; the server closes after the last line
                tailed += ws.recv(timeout=30)
        except ConnectionClosedOK:
            pass
    assert tailed.startswith("LOG-LINE pong\n") and tailed.endswith("LOG-END\n"), tailed

    # The failed task, with its traceback.
    task = failed_task(http, "boom")
    assert task is not None
    assert task["error_type"], task
    assert "history-boom-42" in task["error"] and "Traceback" in task["error"], task["error"]

    # The detached actor as the GCS last reported it.
    actors = api_get(http, "/api/actors", filter="class_name=Keeper")["items"]
    assert [a["state"] for a in actors] == ["ALIVE"], actors
    assert actors[0]["name"] == "keeper"

    # The metrics history the charts read (the node's series up to the stop).
    samples = api_get(http, "/api/history")["samples"]
    assert len(samples) >= 2 and samples[-1]["cpu_percent"] is not None, samples[-3:]
    assert samples[-1]["time"] <= version["stopped_at"] + 1

    # The timeline has the task; the head's log files are listed and readable.
    trace = http.get("/api/timeline").json()
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert any("boom" in str(e.get("name", "")) for e in events)
    files = api_get(http, "/api/logs", limit=1000)["items"]
    raylet = next(f for f in files if f["name"] == "raylet.log")
    tail = api_get(http, "/api/logs/tail", node_id=raylet["node_id"], name="raylet.log")
    assert tail["lines"], tail

    # Nothing can change: every mutating route is refused, saying it is history.
    for method, path in [
        ("POST", f"/api/actors/{actors[0]['actor_id']}/kill"),
        ("POST", f"/api/jobs/{sid}/stop"),
        ("DELETE", f"/api/jobs/{sid}"),
        ("POST", "/api/jobs/"),
    ]:
        r = http.request(method, path, json={"entrypoint": "true"})
        assert r.status_code == 405, (method, path, r.status_code, r.text)
        assert "history" in r.json()["detail"] and session in r.json()["detail"]
    # The same session under its own path (the browser app's relative URLs live there).
    assert api_get(http, f"/sessions/{session}/api/jobs/{sid}")["status"] == "SUCCEEDED"
    assert http.get("/api/version", params={"session": "session_nope"}).status_code == 404
    http.close()


def test_retention_drops_oldest_segments_and_reports_them(tmp_path):
    w = HistoryWriter(str(tmp_path), flush_s=60, segment_bytes=4096, max_bytes=8192, max_age_s=3600)
    w.start()
    for i in range(200):
        w.record("agent", {"node": "n", "msg": {"type": "event", "i": i, "pad": os.urandom(100)}})
    w.close()
    history = tmp_path / "history"
    kept = segments(str(history))
    size = sum(os.path.getsize(p) for _, p in kept)
    assert size <= 8192 + 4096  # the limit, plus the segment being written
    dropped = read_dropped(str(history))
    kept_records = [r for _, p in kept for r in records(p)]
    assert dropped["records"] == 200 - len(kept_records) > 0
    assert dropped["segments"] >= 1
    # The newest records are the ones kept, all of them, in order, and compressed.
    assert [r[2]["msg"]["i"] for r in kept_records] == list(range(200 - len(kept_records), 200))
    assert all(p.endswith(".gz") for _, p in kept)


def test_queue_bound_counts_what_it_drops(tmp_path):
    w = HistoryWriter(str(tmp_path), flush_s=60, max_queue_bytes=1000)
    for i in range(50):
        w.record("agent", {"node": "n", "msg": {"type": "event", "i": i}})
    assert 0 < w.dropped["queue_full"] < 50
    w.close()
    assert read_dropped(str(tmp_path / "history"))["queue_full"] == w.dropped["queue_full"]


@pytest.mark.parametrize("clean", [True, False])
def test_a_restore_after_a_killed_dashboard_says_what_it_lacks(tmp_path, clean):
    """A history without its dashboard's ``stop`` record (SIGKILL) lost what was queued: the
    dashboard restored from it shows a HISTORY_GAP warning naming the last record's time; a
    clean stop's history restores with no such event."""
    from ember.dashboard.history_reader import restore
    from ember.dashboard.state import DashboardState

    w = HistoryWriter(str(tmp_path), flush_s=60)
    w.record("start", {"session_dir": str(tmp_path), "pid": 1})
    w.record("agent", {"node": "n", "msg": {"type": "event", "message": "before the kill"}})
    if clean:
        w.record("stop", {})
    w.close()
    state = DashboardState()
    session = restore(state, str(tmp_path))
    assert session is not None and session.records == (3 if clean else 2)
    gaps = [e for e in state.events if e["kind"] == "HISTORY_GAP"]
    if clean:
        assert gaps == []
    else:
        [gap] = gaps
        assert gap["severity"] == "WARNING" and "died without closing" in gap["message"]
        assert time.strftime("%Y-%m-%d", time.gmtime()) in gap["message"]


@pytest.mark.parametrize("bad", ["/nonexistent-dir", "EMPTY"])
def test_history_of_nothing_is_a_clear_error(tmp_path, bad):
    path = str(tmp_path) if bad == "EMPTY" else bad
    r = subprocess.run(
        [ember_cli(), "dashboard", "--history", path, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0
    assert "session" in r.stderr and path in r.stderr, r.stderr


def test_several_sessions_token_and_refusals(tmp_path):
    """The multi-session app in process: sessions listed, picked by path or ?session=, the
    newest by default; a token off loopback; every mutation refused naming the session."""
    from ember.dashboard.history_reader import find_sessions
    from ember.dashboard.history_server import HistoryServer

    with warnings_ignored():
        from fastapi.testclient import TestClient

    t0 = time.time() - 600
    old = write_history_session(str(tmp_path), "session_a_1", t0 - 3600)
    new = write_history_session(str(tmp_path), "session_b_2", t0)
    os.symlink(new, tmp_path / "session_latest")  # a link is not a session of its own
    dirs = find_sessions(str(tmp_path))
    assert dirs == [old, new]
    with TestClient(HistoryServer(dirs, token="s3cret")) as c:
        assert c.get("/api/sessions").status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        listed = c.get("/api/sessions", headers=auth).json()
        assert [s["session_name"] for s in listed["sessions"]] == ["session_a_1", "session_b_2"]
        assert c.get("/api/version").status_code == 401
        v = c.get("/api/version", headers=auth).json()
        assert v["history"] is True and v["session_name"] == "session_b_2"
        v = c.get("/api/version", params={"session": "session_a_1"}, headers=auth).json()
        assert v["session_name"] == "session_a_1"
        # Records carry the time the dashboard wrote them: these were written just now.
        assert time.time() - 60 < v["stopped_at"] <= time.time()
        r = c.get("/sessions/session_a_1/api/tasks", headers=auth)
        [task] = r.json()["items"]
        assert task["state"] == "FAILED" and task["name"] == "boom"
        detail = c.get(f"/sessions/session_a_1/api/tasks/{task['task_id']}", headers=auth).json()
        assert detail["error"] == HISTORY_TRACEBACK
        samples = c.get("/api/history", params={"node_id": HISTORY_NODE}, headers=auth).json()
        assert [s["cpu_percent"] for s in samples["samples"]] == [10.0, 11.0, 12.0]
        r = c.post("/sessions/session_b_2/api/actors/00/kill", headers=auth)
        assert r.status_code == 405 and "session_b_2" in r.json()["detail"]
        r = c.get("/sessions/nope/api/version", headers=auth)
        assert r.status_code == 404 and "session_a_1" in r.json()["detail"]
        # Live-only routes say why they cannot answer.
        r = c.get("/api/stack", params={"node_id": HISTORY_NODE}, headers=auth)
        assert r.status_code == 503 and "history" in r.text, r.text


def test_a_dead_nodes_logs_stay_readable(tmp_path):
    """A worker node's logs reach the head as they are written; once the node is killed they
    are read from the head's copy, by the live dashboard and by the history server."""
    import ember
    from ember.cluster_utils import Cluster
    from ember.dashboard.node_logs import node_logs_dir

    if ember.is_initialized():
        ember.shutdown()
    # A root of our own (short: Unix socket paths), kept after the cluster stops.
    root = tempfile.mkdtemp(prefix="emb-hist-", dir="/tmp")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1}, temp_root=root)
    try:
        worker = cluster.add_node(num_cpus=1, resources={"far": 1})
        node_id = worker.node_id.hex()
        head_session = cluster.head_node.session_dir
        cluster.connect()

        @ember.remote(resources={"far": 1})
        def shout() -> int:
            print("FAR-NODE-MARK", flush=True)
            return os.getpid()

        pid = ember.get(shout.remote(), timeout=60)
        name = next(
            n for n in os.listdir(os.path.join(worker.session_dir, "logs")) if f"-{pid}.out" in n
        )

        def shipped() -> bool:
            d = node_logs_dir(head_session, node_id)
            path = os.path.join(d, name) if d else ""
            return os.path.exists(path) and "FAR-NODE-MARK" in open(path).read()

        wait_until(shipped, 30, 0.2, "the worker node's log to reach the head")
        live = httpx.Client(base_url=cluster.head_node.dashboard_url, timeout=30)
        cluster.remove_node(worker, allow_graceful=False)
        # Its machine is gone with its disk: only the head's copy is left.
        shutil.rmtree(os.path.join(worker.session_dir, "logs"))
        wait_until(
            lambda: api_get(live, f"/api/nodes/{node_id}")["state"] == "DEAD",
            60,
            0.5,
            "the node declared dead",
        )
        tail = api_get(live, "/api/logs/tail", node_id=node_id, name=name)
        assert any("FAR-NODE-MARK" in line for line in tail["lines"]), tail
        live.close()
        ember.shutdown()
    finally:
        cluster.shutdown()
    # The stopped head's history reads the same copy.
    from ember.dashboard.history_server import HistoryServer

    with warnings_ignored():
        from fastapi.testclient import TestClient

    try:
        with TestClient(HistoryServer([head_session])) as c:
            tail = c.get("/api/logs/tail", params={"node_id": node_id, "name": name}).json()
            assert any("FAR-NODE-MARK" in line for line in tail["lines"]), tail
            files = c.get("/api/logs", params={"filter": f"node_id={node_id}"}).json()["items"]
            assert name in [f["name"] for f in files]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_bad_setting_turns_the_history_off_saying_so(tmp_path, monkeypatch, caplog):
    from ember.dashboard.history_writer import attach
    from ember.dashboard.state import DashboardState

    monkeypatch.setenv("EMBER_HISTORY_SEGMENT_BYTES", "lots")
    state = DashboardState()
    assert attach(state, str(tmp_path)) is None
    assert state.recorder is None
    assert "EMBER_HISTORY_SEGMENT_BYTES='lots' is not a number" in caplog.text
