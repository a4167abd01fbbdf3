"""The agent and the dashboard on a real local node: real processes, sockets, py-spy."""

from __future__ import annotations

import json
import os
import socket
import time

import ember
import httpx
import psutil
import pytest
from ember_test_utils import assert_no_ember_children, ember_children, wait_until


@pytest.fixture(scope="module")
def live():
    if ember.is_initialized():
        ember.shutdown()
    # Hold a port so the dashboard must move to the next free one (and say so).
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        ctx = ember.init(num_cpus=2, dashboard_port=port)
    finally:
        taken.close()
    client = httpx.Client(base_url=ctx.dashboard_url, timeout=60)
    yield {"ctx": ctx, "http": client, "held_port": port}
    client.close()
    ember.shutdown()
    assert_no_ember_children()


def _get(live, path, **params):
    r = live["http"].get(path, params=params)
    assert r.status_code == 200, (path, r.status_code, r.text[:500])
    return r.json()


def _node(live):
    return wait_until(lambda: _get(live, "/api/nodes")["items"], 15, 0.2, "the node")[0]


def test_dashboard_moves_to_the_next_free_port(live):
    url = live["ctx"].dashboard_url
    port = int(url.rsplit(":", 1)[1])
    assert port != live["held_port"] and live["held_port"] < port < live["held_port"] + 100
    assert _get(live, "/api/version")["api"] == 1


@ember.remote
def _one() -> int:
    return 1


def test_node_metrics_and_processes_arrive(live):
    # A node starts its workers with its first lease: run one task so a worker is listed.
    assert ember.get(_one.remote(), timeout=30) == 1
    node = _node(live)
    assert node["state"] == "ALIVE" and node["is_head"]
    detail = wait_until(
        lambda: (
            (d := _get(live, f"/api/nodes/{node['node_id']}"))["metrics"].get("num_cpus")
            and any(w["kind"] == "worker" for w in d["workers"])  # sampled after the task ran
            and d
        ),
        15,
        0.2,
        "metrics and the worker",
    )
    m = detail["metrics"]
    assert m["mem_total_bytes"] > 0 and len(m["cpu_per_core"]) == m["num_cpus"]
    assert m["object_store_capacity_bytes"] > 0 and m["disks"]
    kinds = {w["kind"] for w in detail["workers"]}
    assert {"raylet", "gcs_server", "dashboard", "driver", "worker"} <= kinds
    assert all(w["rss_bytes"] > 0 for w in detail["workers"])
    hist = wait_until(lambda: _get(live, "/api/history")["samples"], 15, 0.2, "history")
    assert hist[-1]["mem_total_bytes"] == m["mem_total_bytes"]


def test_tasks_and_failures_reach_the_dashboard(live):
    @ember.remote
    def square(x):
        return x * x

    @ember.remote
    def explode():
        raise KeyError("dashboard-boom")

    assert sum(ember.get([square.remote(i) for i in range(20)])) == 2470
    with pytest.raises(KeyError):
        ember.get(explode.remote())
    summary = wait_until(
        lambda: (
            (s := _get(live, "/api/tasks/summary"))
            and any(r["name"].endswith("explode") for r in s["by_function"])
            and any(
                r["name"].endswith("square") and r["states"].get("FINISHED") == 20
                for r in s["by_function"]
            )
            and s
        ),
        15,
        0.2,
        "task events",
    )
    sq = next(r for r in summary["by_function"] if r["name"].endswith("square"))
    assert sq["states"].get("FINISHED") == 20
    failed = _get(live, "/api/tasks", filter="state=FAILED")["items"]
    row = next(r for r in failed if r["name"].endswith("explode"))
    assert "dashboard-boom" in row["error"] and row["node_id"] and row["pid"]
    events = _get(live, "/api/events", filter="kind=TASK_FAILED")["items"]
    assert any("dashboard-boom" in (e["detail"] or "") for e in events)


def test_actors_listed_killed_and_killed_again(live):
    @ember.remote
    class Pinger:
        def ping(self):
            return "pong"

    a = Pinger.options(name="dash-pinger").remote()
    assert ember.get(a.ping.remote()) == "pong"
    row = wait_until(
        lambda: next(
            (
                r
                for r in _get(live, "/api/actors", filter="name=dash-pinger")["items"]
                if r["state"] == "ALIVE" and r["executed_calls"] >= 1
            ),
            None,
        ),
        15,
        0.2,
        "the actor",
    )
    assert row["class_name"].endswith("Pinger") and row["pid"]
    assert row["title"] == f"{row['class_name']}(dash-pinger)"
    r = live["http"].post(f"/api/actors/{row['actor_id']}/kill")
    assert r.status_code == 200 and r.json()["ok"] is True
    wait_until(lambda: _get(live, f"/api/actors/{row['actor_id']}")["state"] == "DEAD", 15, 0.2)
    again = live["http"].post(f"/api/actors/{row['actor_id']}/kill").json()
    assert again["ok"] is False and "already dead" in again["message"]


def test_logs_list_tail_search_download(live):
    marker = f"dashboard-log-marker-{os.getpid()}"

    @ember.remote
    def shout():
        print(marker, flush=True)
        return os.getpid()

    pid = ember.get(shout.remote())
    node = _node(live)["node_id"]
    files = wait_until(
        lambda: _get(live, "/api/logs", filter=[f"pid={pid}", "stream=out"])["items"], 15, 0.2
    )
    name = files[0]["name"]
    assert files[0]["component"] == "worker"
    tail = wait_until(
        lambda: (
            marker
            in "\n".join(
                (t := _get(live, "/api/logs/tail", node_id=node, name=name, lines=50))["lines"]
            )
            and t
        ),
        15,
        0.2,
    )
    assert tail["size"] > 0
    found = _get(live, "/api/logs/search", node_id=node, pattern=marker)
    assert any(m["name"] == name for m in found["matches"])
    r = live["http"].get("/api/logs/download", params={"node_id": node, "name": name})
    assert r.status_code == 200 and marker in r.text
    assert "attachment" in r.headers["content-disposition"]
    r = live["http"].get("/api/logs/tail", params={"node_id": node, "name": "../../etc/passwd"})
    assert r.status_code == 404


def test_objects_memory_view(live):
    np = pytest.importorskip("numpy")
    ref = ember.put(np.zeros(300_000, dtype=np.uint8))
    oid = ref.hex()
    out = wait_until(
        lambda: (
            (o := _get(live, "/api/objects", max_age=0))
            and any(r["object_id"] == oid for r in o["items"])
            and o
        ),
        15,
        0.3,
    )
    row = next(r for r in out["items"] if r["object_id"] == oid)
    assert row["reference_type"] == "LOCAL_REFERENCE" and row["object_size"] >= 300_000
    assert row["pid"] == os.getpid() and out["missing"] == {}


def test_stack_and_profile_with_py_spy(live):
    @ember.remote
    class Sleeper:
        def pid(self):
            return os.getpid()

        def nap_in_a_named_frame(self, s):
            time.sleep(s)

    s = Sleeper.remote()
    pid = ember.get(s.pid.remote())
    s.nap_in_a_named_frame.remote(30)
    wait_until(
        lambda: any(w["pid"] == pid for w in _get(live, "/api/workers", limit=1000)["items"]),
        15,
        0.2,
    )
    stacks = wait_until(
        lambda: (
            (st := _get(live, "/api/stack", pid=pid))
            and "nap_in_a_named_frame" in json.dumps(st)
            and st
        ),
        20,
        0.5,
        "the actor's stack",
    )
    proc = stacks["nodes"][0]["processes"][0]
    assert proc["pid"] == pid and proc["error"] is None and proc["threads"]
    r = live["http"].get("/api/profile", params={"pid": pid, "duration": 1, "format": "svg"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    assert "<svg" in r.text
    r = live["http"].get("/api/profile", params={"pid": pid, "duration": 1})
    assert r.status_code == 200 and "speedscope" in r.json()["$schema"]
    r = live["http"].get("/api/profile", params={"pid": 4_000_000, "duration": 1})
    assert r.status_code == 404 and "4000000" in r.json()["detail"]
    ember.kill(s)


def test_live_stream_sends_node_metrics(live):
    with live["http"].stream("GET", "/api/stream/sse", params={"topics": "node_metrics"}) as r:
        assert r.status_code == 200
        deadline = time.monotonic() + 15
        for line in r.iter_lines():
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                assert msg["type"] == "node_metrics" and msg["mem_total_bytes"] > 0
                break
            assert time.monotonic() < deadline, "no metrics within 15 s"


def test_a_crashed_actor_worker_is_an_error_event_with_its_stderr(live):
    @ember.remote
    class Doomed:
        def die(self):
            import sys

            print("last words before the crash", file=sys.stderr, flush=True)
            os._exit(3)

        def pid(self):
            return os.getpid()

    d = Doomed.remote()
    pid = ember.get(d.pid.remote())
    # The agent reports a worker that vanished while it held an actor or a task, as seen in
    # its last 2-second sample; wait until it has seen this one.
    wait_until(
        lambda: any(
            w["pid"] == pid and w["state"] == "ACTOR"
            for w in _get(live, "/api/workers", limit=1000)["items"]
        ),
        15,
        0.2,
    )
    d.die.remote()
    ev = wait_until(
        lambda: next(
            iter(_get(live, "/api/events", filter=["kind=WORKER_DIED", f"pid={pid}"])["items"]),
            None,
        ),
        20,
        0.3,
        "a WORKER_DIED event",
    )
    assert ev["severity"] == "ERROR" and "last words before the crash" in (ev["detail"] or "")
    assert ev["pid"] == pid
    # The GCS's view arrives too: the actor is DEAD, with an ACTOR_DIED event naming the cause.
    wait_until(lambda: _get(live, "/api/events", filter="kind=ACTOR_DIED")["total"], 15, 0.3)


def test_an_actor_ended_on_purpose_is_not_reported_as_a_crash(live):
    @ember.remote
    class Killed:
        def pid(self):
            return os.getpid()

    victims = [Killed.remote(), Killed.remote()]
    pids = [ember.get(v.pid.remote()) for v in victims]
    wait_until(
        lambda: (
            {
                w["pid"]
                for w in _get(live, "/api/workers", limit=1000)["items"]
                if w["state"] == "ACTOR"
            }
            >= set(pids)
        ),
        15,
        0.2,
        "the actors' workers in the agent's sample",
    )
    ember.kill(victims[0])  # killed on purpose
    os.kill(pids[1], 9)  # killed from outside: a crash
    wait_until(
        lambda: _get(live, "/api/events", filter=["kind=WORKER_DIED", f"pid={pids[1]}"])["total"],
        20,
        0.3,
        "the crash reported",
    )
    wait_until(
        lambda: not {w["pid"] for w in _get(live, "/api/workers", limit=1000)["items"]} & set(pids),
        20,
        0.3,
        "both gone from the agent's sample",
    )
    # The agent has seen both go; only the crash is an error.
    assert _get(live, "/api/events", filter=["kind=WORKER_DIED", f"pid={pids[0]}"])["total"] == 0


def test_websocket_stream_on_the_real_server(live):
    import asyncio

    import websockets

    url = live["ctx"].dashboard_url.replace("http://", "ws://") + "/api/stream?topics=node_metrics"

    async def first_metrics() -> dict:
        async with websockets.connect(url, open_timeout=10) as ws:
            hello = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert hello == {"type": "hello", "topics": ["node_metrics"]}
            while True:
                batch = json.loads(await asyncio.wait_for(ws.recv(), 20))
                if batch["messages"]:
                    return batch["messages"][0]

    msg = asyncio.run(first_metrics())
    assert msg["type"] == "node_metrics" and msg["mem_total_bytes"] > 0


def test_the_heads_agent_runs_in_the_dashboards_process(live):
    """No agent process on the head: the dashboard's process samples the node and serves its
    logs and stacks (one interpreter less, issue 2 §7); the node's start is still its
    raylet's."""
    cmds = [" ".join(p.cmdline()) for p in ember_children()]
    assert not any("ember.agent" in c for c in cmds), cmds
    node = _node(live)
    dashboard = wait_until(
        lambda: _get(live, "/api/workers", filter="kind=dashboard")["items"], 15, 0.2, "it"
    )[0]
    assert "ember.dashboard.server" in " ".join(psutil.Process(dashboard["pid"]).cmdline())
    assert not _get(live, "/api/workers", filter="kind=agent")["items"]
    raylet = wait_until(
        lambda: _get(live, "/api/workers", filter="kind=raylet")["items"], 15, 0.2, "raylet"
    )[0]
    started = wait_until(
        lambda: (
            abs(
                (s := _get(live, f"/api/nodes/{node['node_id']}")["start_time"])
                - psutil.Process(raylet["pid"]).create_time()
            )
            < 0.5
            and s
        ),
        15,
        0.2,
        "the raylet's start time",
    )
    assert started


def test_follow_streams_new_lines_and_reports_a_deleted_file(live):
    node = _node(live)["node_id"]
    path = os.path.join(live["ctx"].session_dir, "logs", "followed-by-test.log")
    with open(path, "w") as f:
        f.write("first line\n")
    wait_until(
        lambda: _get(live, "/api/logs", filter="name=followed-by-test.log")["total"], 15, 0.2
    )
    params = {"node_id": node, "name": "followed-by-test.log", "lines": 5}
    seen: list[str] = []
    with live["http"].stream("GET", "/api/logs/follow", params=params) as r:
        assert r.status_code == 200
        event = None
        deadline = time.monotonic() + 20
        for line in r.iter_lines():
            assert time.monotonic() < deadline, f"follow stalled; saw {seen}"
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                data = json.loads(line[5:])
                if event == "missing":
                    assert "no longer exists" in data["message"]
                    break
                seen.extend(data.get("lines", []))
                if seen == ["first line"]:
                    with open(path, "a") as f:
                        f.write("second line\n")
                elif "second line" in seen:
                    os.unlink(path)  # deleted under the follower: the stream says so
                event = None
    assert seen[:2] == ["first line", "second line"]


def test_url_prefix_from_init_serves_the_api_and_the_app(ember_start):
    # Near the end of the module: ember_start replaces the module's node.
    ctx = ember_start(dashboard_url_prefix="/proxied/ember/")
    assert ctx.dashboard_url.endswith("/proxied/ember")
    with httpx.Client(timeout=60) as http:
        version = http.get(f"{ctx.dashboard_url}/api/version")
        assert version.status_code == 200 and version.json()["api"] == 1
        index = http.get(f"{ctx.dashboard_url}/")
        assert index.status_code == 200 and "<title>Ember dashboard</title>" in index.text
        # The app's assets, referenced relative to the index, load under the prefix too.
        asset = index.text.split('src="./', 1)[1].split('"', 1)[0]
        script = http.get(f"{ctx.dashboard_url}/{asset}")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
        # So does the API's own documentation, whose links carry the prefix.
        docs = http.get(f"{ctx.dashboard_url}/docs")
        assert docs.status_code == 200 and "/proxied/ember/openapi.json" in docs.text


def test_include_dashboard_false_starts_no_dashboard(ember_start):
    # Last in the module: ember_start replaces the module's node.
    ctx = ember_start(include_dashboard=False)
    assert ctx.dashboard_url == ""
    cmds = [" ".join(p.cmdline()) for p in ember_children()]
    assert not any("ember.dashboard.server" in c for c in cmds)
    assert any("ember.agent" in c for c in cmds)  # the agent runs on every node
