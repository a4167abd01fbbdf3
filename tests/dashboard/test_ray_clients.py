"""Ray's own clients against Ember's dashboard: ``ray list``, ``ray get``, ``ray summary``,
``ray.util.state`` and the Jobs client of Ray 2.60, run from their own environment
(``tests/tools/.ray-venv``, made by ``scripts/dev.sh setup``), reading a real Ember node.

Without that environment the tests skip, except in CI (``CI=true``) where they fail naming
the command that makes it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import threading
from pathlib import Path

import ember
import httpx
import pytest
import uvicorn
from dashboard_state_fill import NODE, fill
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.state import DashboardState
from ember.util.placement_group import placement_group
from ember_test_utils import assert_no_ember_children, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
RAY_PYTHON = ROOT / "tests" / "tools" / ".ray-venv" / "bin" / "python"
RUNNER = Path(__file__).with_name("ray_client_runner.py")
SETUP = "scripts/dev.sh setup (or: python3 scripts/ray_venv.py tests/tools/.ray-venv 'ray[default]==2.60.0')"


def _require_ray() -> None:
    if RAY_PYTHON.exists():
        return
    why = f"Ray's clients are not installed (no {RAY_PYTHON.relative_to(ROOT)}); run {SETUP}"
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(why)
    pytest.skip(why)


def _ray_env() -> dict[str, str]:
    # Ray's clients find the cluster from --address only: no Ember or Ray variables leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_", "RAY_"))}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


@ember.remote
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def incr(self) -> int:
        self.n += 1
        return self.n


@ember.remote
def square(x: int) -> int:
    return x * x


@ember.remote
def boom() -> None:
    raise ValueError("boom on purpose")


@pytest.fixture(scope="module")
def cluster():
    """A real node with what a user would list: a placement group, a live named actor and a
    killed one, five finished tasks and a failed one, and an object in the store."""
    _require_ray()
    if ember.is_initialized():
        ember.shutdown()
    ctx = ember.init(num_cpus=4, dashboard_port=0)
    http = httpx.Client(base_url=ctx.dashboard_url, timeout=60)
    try:
        pg = placement_group([{"CPU": 1}], strategy="PACK")
        ember.get(pg.ready(), timeout=30)
        counter = Counter.options(name="counter").remote()
        assert ember.get(counter.incr.remote()) == 1
        gone = Counter.remote()
        ember.get(gone.incr.remote())
        ember.kill(gone)
        assert ember.get([square.remote(i) for i in range(5)]) == [0, 1, 4, 9, 16]
        with pytest.raises(Exception, match="boom on purpose"):
            ember.get(boom.remote())
        ref = ember.put(b"x" * 300_000)

        def seen() -> bool:
            states = {a["actor_id"]: a["state"] for a in http.get("/api/actors").json()["items"]}
            tasks = http.get("/api/tasks/summary").json()["by_state"]
            return (
                sorted(states.values()) == ["ALIVE", "DEAD"]
                and tasks.get("FINISHED", 0) >= 7
                and tasks.get("FAILED") == 1
            )

        wait_until(seen, 20, 0.2, "the dashboard to see the actors and tasks")
        # Read once the dashboard has seen them: its actor list follows the GCS's a poll later.
        alive = next(a for a in http.get("/api/actors").json()["items"] if a["name"] == "counter")
        node = http.get("/api/nodes").json()["items"][0]
        yield {
            "url": ctx.dashboard_url,
            "actor_id": alive["actor_id"],
            "dead_actor_id": next(
                a["actor_id"]
                for a in http.get("/api/actors").json()["items"]
                if a["name"] != "counter"
            ),
            "node": node,
            "pg_id": pg.id.hex(),
            "object_id": ref.hex(),
            "pid": os.getpid(),
            "handles": (counter, ref, pg),
        }
    finally:
        http.close()
        ember.shutdown()
        assert_no_ember_children()


@pytest.fixture(scope="module")
def answers(cluster):
    """Everything Ray's clients answered, from one run of the Ray environment."""
    done = subprocess.run(
        [str(RAY_PYTHON), str(RUNNER), cluster["url"], cluster["actor_id"]],
        capture_output=True,
        text=True,
        timeout=120,
        env=_ray_env(),
        cwd=RUNNER.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _json(answers, command: str):
    res = answers["cli"][command]
    assert res["exit_code"] == 0, (command, res["error"], res["output"][-2000:])
    return json.loads(res["output"])


def _text(answers, command: str) -> str:
    res = answers["cli"][command]
    assert res["exit_code"] == 0, (command, res["error"], res["output"][-2000:])
    return res["output"]


def test_ray_list_actors_shows_full_ids_states_and_filters(cluster, answers):
    rows = _json(answers, "list actors --format json --limit 1000")
    by_id = {r["actor_id"]: r for r in rows}
    assert by_id[cluster["actor_id"]]["class_name"] == "Counter"
    assert by_id[cluster["actor_id"]]["state"] == "ALIVE"
    assert by_id[cluster["actor_id"]]["name"] == "counter"
    assert by_id[cluster["actor_id"]]["node_id"] == cluster["node"]["node_id"]
    assert by_id[cluster["dead_actor_id"]]["state"] == "DEAD"
    alive = _json(answers, "list actors --filter state=ALIVE --format json")
    assert [r["actor_id"] for r in alive] == [cluster["actor_id"]]
    others = _json(answers, "list actors --filter state!=ALIVE --format json")
    assert [r["actor_id"] for r in others] == [cluster["dead_actor_id"]]


def test_ray_get_actor_prints_the_actor(cluster, answers):
    out = _text(answers, f"get actors {cluster['actor_id']}")
    assert f"actor_id: {cluster['actor_id']}" in out
    assert "class_name: Counter" in out and "name: counter" in out and "state: ALIVE" in out


def test_ray_list_tasks_with_states_errors_and_limit(cluster, answers):
    rows = _json(answers, "list tasks --format json --limit 1000")
    squares = [r for r in rows if r["func_or_class_name"].endswith("square")]
    assert len(squares) == 5 and {r["state"] for r in squares} == {"FINISHED"}
    assert all(r["type"] == "NORMAL_TASK" and r["worker_pid"] for r in squares)
    incr = [r for r in rows if r["func_or_class_name"].endswith("Counter.incr")]
    assert len(incr) == 2 and all(r["type"] == "ACTOR_TASK" and r["actor_id"] for r in incr)
    # Short tasks and calls send no RUNNING of their own (their owner's end says where they
    # ran): Ray's client still reads the node and the worker of each.
    workers = {
        w["worker_id"]: w["pid"] for w in _json(answers, "list workers --format json --limit 1000")
    }
    for r in squares + incr:
        assert r["node_id"] == cluster["node"]["node_id"], r
    for r in squares:  # their workers are alive (an actor's may have died since)
        assert workers.get(r["worker_id"]) == r["worker_pid"], (r, workers)
    for actor_id in {r["actor_id"] for r in incr}:  # an actor's calls: its one worker
        ran_on = {(r["worker_id"], r["worker_pid"]) for r in incr if r["actor_id"] == actor_id}
        assert len(ran_on) == 1 and all(ran_on.pop()), incr
    failed = _json(answers, "list tasks --filter state=FAILED --format json --detail")
    assert len(failed) == 1 and failed[0]["func_or_class_name"].endswith("boom")
    assert failed[0]["error_type"] == "TASK_EXECUTION_EXCEPTION"
    assert "boom on purpose" in failed[0]["error_message"]
    phases = [e["state"] for e in failed[0]["events"]]
    assert phases[0] == "PENDING_ARGS_AVAIL" and phases[-1] == "FAILED"
    got = _text(answers, f"get tasks {failed[0]['task_id']}")
    assert f"task_id: {failed[0]['task_id']}" in got and "state: FAILED" in got
    assert len(_json(answers, "list tasks --limit 2 --format json")) == 2


def test_ray_list_nodes_and_workers(cluster, answers):
    (node,) = _json(answers, "list nodes --format json --limit 1000")
    assert node["node_id"] == cluster["node"]["node_id"]
    assert node["node_ip"] == cluster["node"]["node_ip"]
    assert node["is_head_node"] is True and node["state"] == "ALIVE"
    workers = _json(answers, "list workers --format json --limit 1000")
    drivers = [w for w in workers if w["worker_type"] == "DRIVER"]
    assert [w["pid"] for w in drivers] == [cluster["pid"]]
    assert all(w["is_alive"] and w["ip"] == node["node_ip"] for w in workers)
    assert len([w for w in workers if w["worker_type"] == "WORKER"]) >= 1


def test_ray_list_objects_placement_groups_and_jobs(cluster, answers):
    objects = _json(answers, "list objects --format json --limit 1000")
    mine = [o for o in objects if o["object_id"] == cluster["object_id"]]
    assert mine and mine[0]["pid"] == cluster["pid"] and mine[0]["type"] == "DRIVER"
    (pg,) = _json(answers, "list placement-groups --format json --limit 1000")
    assert pg["placement_group_id"] == cluster["pg_id"] and pg["state"] == "CREATED"
    jobs = _json(answers, "list jobs --format json --limit 1000")
    assert [j["driver_info"]["pid"] for j in jobs] == [str(cluster["pid"])]
    assert jobs[0]["status"] == "RUNNING" and jobs[0]["type"] == "DRIVER"
    assert pg["creator_job_id"] == jobs[0]["job_id"]


def test_ray_summaries(answers):
    tasks = _text(answers, "summary tasks")
    assert "square" in tasks and "FINISHED: 5" in tasks and "FAILED: 1" in tasks
    actors = _text(answers, "summary actors")
    assert "Counter" in actors and "ALIVE: 1" in actors and "DEAD: 1" in actors
    assert "total_objects" in _text(answers, "summary objects")


def test_ray_sdk_and_jobs_client(cluster, answers):
    sdk = answers["sdk"]
    assert sdk["alive_counters"] == [cluster["actor_id"]]
    assert sdk["not_finished"] == 1  # the failed task
    assert sdk["get_actor"] == {"class_name": "Counter", "name": "counter"}
    assert sdk["jobs_api_version"] == "4"


def test_the_ray_command_itself(cluster):
    """The installed ``ray`` entry point, as a user types it."""
    ray = RAY_PYTHON.parent / "ray"
    done = subprocess.run(
        [str(ray), "list", "actors", "--address", cluster["url"], "--filter", "name=counter"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_ray_env(),
    )
    assert done.returncode == 0, done.stderr
    assert cluster["actor_id"] in done.stdout and "Total: 1" in done.stdout


@pytest.fixture
def token_dashboard():
    """A dashboard that requires the cluster token (as one bound off loopback does), served
    by uvicorn in a thread over a state filled as the agents fill it."""
    _require_ray()
    token = secrets.token_hex(16)
    st = DashboardState()
    fill(st, 10, 3)
    app = create_app(DashboardContext(state=st, host="0.0.0.0"), token=token)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 15, 0.05, "the dashboard to listen")
        yield f"http://127.0.0.1:{server.config.port}", token
    finally:
        server.should_exit = True
        thread.join(15)


def test_ray_clients_pass_the_cluster_token(token_dashboard):
    """Ray's clients send ``Authorization: Bearer`` from ``RAY_AUTH_TOKEN`` in its token mode,
    which the dashboard takes as the cluster token."""
    url, token = token_dashboard
    ray = str(RAY_PYTHON.parent / "ray")
    command = [ray, "list", "nodes", "--address", url, "--format", "json"]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60, env=_ray_env())
    assert refused.returncode != 0 and "token authentication" in refused.stderr.lower()
    env = {**_ray_env(), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    (node,) = json.loads(done.stdout)
    assert node["node_id"] == NODE and node["node_ip"] == "10.0.0.1"
