"""``ember.util.state`` and ``ember list|get|summary`` against one live local node: the values
a user reads (full ids, states, counts) as the cluster has them."""

from __future__ import annotations

import json
import os
import time
import urllib.request
import warnings
from typing import Any

import ember
import pytest
import yaml
from click.testing import CliRunner
from ember.cli.main import main
from ember.dashboard.schemas import JOBS, PLACEMENT_GROUPS
from ember.util import state
from ember.util.placement_group import placement_group, remove_placement_group
from ember_test_utils import wait_until
from pydantic import TypeAdapter

pytestmark = pytest.mark.timeout(120)


@ember.remote
def square(x: int) -> int:
    return x * x


@ember.remote
def boom() -> None:
    raise ValueError("boom on purpose")


@ember.remote
def held(path: str) -> str:
    # Runs until the test removes the file: a task that is RUNNING while the test reads.
    while os.path.exists(path):
        time.sleep(0.05)
    return "released"


@ember.remote
class Counter:
    def incr(self) -> int:
        print("counter-incremented", flush=True)
        return 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ember.is_initialized():
        ember.shutdown()
    ctx = ember.init(num_cpus=2, dashboard_port=0)
    hold = tmp_path_factory.mktemp("state") / "hold"
    hold.write_text("")
    pg = placement_group([{"CPU": 0.1}], strategy="PACK", name="state-pg")
    ember.get(pg.ready(), timeout=30)
    squares = [square.remote(i) for i in range(4)]
    assert ember.get(squares) == [0, 1, 4, 9]
    with pytest.raises(ember.exceptions.RayTaskError):
        ember.get(boom.remote())
    counter = Counter.options(name="state-counter", num_cpus=0).remote()
    assert ember.get(counter.incr.remote()) == 1
    running = held.remote(str(hold))
    blob = ember.put(b"x" * 200_000)

    def ready() -> bool:
        tasks = state.list_tasks(limit=1000)
        return sum(t.state == "FINISHED" for t in tasks) >= 5 and any(
            t.state == "RUNNING" for t in tasks
        )

    wait_until(ready, timeout=30, interval=0.2, message="the tasks on the dashboard")
    yield {
        "ctx": ctx,
        "counter": counter,
        "pg": pg,
        "squares": squares,
        "running": running,
        "blob": blob,
        "url": ctx.dashboard_url,
    }
    hold.unlink()
    assert ember.get(running, timeout=30) == "released"
    remove_placement_group(pg)
    ember.shutdown()


def _counter_id(cluster) -> str:
    return cluster["counter"]._actor_id.hex()


def test_actors_list_and_get(cluster):
    actors = state.list_actors()
    assert [(a.name, a.state, a.class_name) for a in actors] == [
        ("state-counter", "ALIVE", "Counter")
    ]
    actor = actors[0]
    assert actor.actor_id == _counter_id(cluster) and len(actor.actor_id) == 32
    # Ray's dict-style access and asdict().
    assert actor["state"] == "ALIVE" and actor.get("pid") == actor.pid > 0
    assert actor.asdict()["actor_id"] == actor.actor_id
    # Detail-only columns are there only with detail.
    assert actor.is_detached is None and actor.num_restarts is None
    detailed = state.list_actors(detail=True)[0]
    assert detailed.is_detached is False and detailed.num_restarts == 0
    got = state.get_actor(actor.actor_id)
    assert got.actor_id == actor.actor_id and got.num_restarts == 0
    assert state.get_actor("ab" * 16) is None


def test_tasks_filters_limit_and_get(cluster):
    finished = state.list_tasks(filters=[("state", "=", "FINISHED")], limit=1000)
    names = sorted(t.name for t in finished)
    # The actor's creation task is a task, as in Ray.
    assert names == ["Counter.__init__", "Counter.incr", "square", "square", "square", "square"]
    # Values compare without regard to case; != keeps the rest.
    assert len(state.list_tasks(filters=[("state", "=", "finished")])) == len(finished)
    others = state.list_tasks(filters=[("state", "!=", "FINISHED")], limit=1000)
    assert sorted(t.name for t in others) == ["boom", "held"]
    assert {t.name: t.state for t in others}["held"] == "RUNNING"
    failed = next(t for t in others if t.state == "FAILED")
    assert failed.error_type and failed.error_message is None  # a detail column
    assert "boom on purpose" in state.get_task(failed.task_id).error_message

    # The task of an ObjectRef, and its full id.
    square0 = state.get_task(cluster["squares"][0])
    assert square0.task_id == cluster["squares"][0].task_id().hex()
    assert square0.state == "FINISHED" and len(square0.task_id) == 32
    assert state.get_task("ff" * 16) is None

    # The limit cuts after the filters; _explain says how many matched.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        two = state.list_tasks(filters=[("state", "=", "FINISHED")], limit=2, _explain=True)
    assert len(two) == 2
    assert any("Limit last 2 entries (Total 6)" in str(w.message) for w in caught)


def test_bad_queries_are_clear(cluster):
    with pytest.raises(state.StateApiException) as bad:
        state.list_tasks(filters=[("colour", "=", "red")])
    assert "colour" in str(bad.value) and "func_or_class_name" in str(bad.value)
    with pytest.raises(ValueError, match="Unsupported filter predicate"):
        state.list_actors(filters=[("state", ">", "ALIVE")])
    with pytest.warns(UserWarning, match="multiple '=' filters"):
        assert state.list_actors(filters=[("state", "=", "ALIVE"), ("state", "=", "DEAD")]) == []
    with pytest.raises(state.ServerUnavailable):
        state.list_nodes(address="http://127.0.0.1:9")


def test_nodes_workers_jobs_and_placement_groups(cluster):
    ctx = cluster["ctx"]
    nodes = state.list_nodes()
    assert [(n.node_id, n.state, n.is_head_node) for n in nodes] == [(ctx.node_id, "ALIVE", True)]
    assert state.get_node(ctx.node_id).resources_total["CPU"] == 2.0
    workers = state.list_workers(filters=[("worker_type", "=", "WORKER")], limit=1000)
    counter_pid = state.get_actor(_counter_id(cluster)).pid
    assert counter_pid in {w.pid for w in workers}
    one = workers[0]
    assert state.get_worker(one.worker_id).pid == one.pid
    jobs = state.list_jobs()
    assert [(j.type, j.status) for j in jobs] == [("DRIVER", "RUNNING")]
    assert jobs[0].driver_info.pid == str(os.getpid())
    assert state.get_job(jobs[0].job_id).job_id == jobs[0].job_id
    pgs = state.list_placement_groups()
    pg_id = cluster["pg"].id.hex()
    assert [(p.placement_group_id, p.name, p.state) for p in pgs] == [
        (pg_id, "state-pg", "CREATED")
    ]
    assert state.get_placement_group(pg_id).bundles[0]["unit_resources"] == {"CPU": 0.1}
    assert state.list_runtime_envs() == []


def _api(cluster, path: str) -> Any:
    with urllib.request.urlopen(cluster["url"] + path, timeout=30) as r:
        return json.load(r)


def test_ember_rows_and_ray_rows_agree(cluster):
    """``/api`` and Ray's ``/api/v0`` are two wire formats of one state: every row's id and
    state read the same in both (in Ray's words where Ember's differ)."""
    ray_words = {"PENDING": "PENDING_CREATION", "RETRYING": "PENDING_NODE_ASSIGNMENT"}

    def ember_rows(path: str, key: str, state_key: str = "state") -> dict[str, str]:
        rows = _api(cluster, path + "?limit=10000")
        rows = rows if isinstance(rows, list) else rows["items"]
        return {r[key]: ray_words.get(r[state_key], r[state_key]) for r in rows}

    def ray_rows(rows: list, key: str, state_key: str = "state") -> dict[str, str]:
        return {r[key]: r[state_key] for r in rows}

    # The held task keeps one row RUNNING while both are read; the rest are final.
    assert ember_rows("/api/actors", "actor_id") == ray_rows(state.list_actors(), "actor_id")
    assert ember_rows("/api/tasks", "task_id") == ray_rows(
        state.list_tasks(limit=10_000), "task_id"
    )
    assert ember_rows("/api/nodes", "node_id") == ray_rows(state.list_nodes(), "node_id")
    pgs = ember_rows("/api/placement_groups", "placement_group_id")
    assert pgs == ray_rows(state.list_placement_groups(), "placement_group_id")
    assert pgs == {cluster["pg"].id.hex(): "CREATED"}
    jobs = _api(cluster, "/api/jobs/")
    assert {j["job_id"]: j["status"] for j in jobs} == ray_rows(
        state.list_jobs(), "job_id", "status"
    )
    ember_workers = {
        w["worker_id"]
        for w in _api(cluster, "/api/workers?limit=10000")["items"]
        if w["kind"] in ("worker", "driver") and w["worker_id"]
    }
    assert {w.worker_id for w in state.list_workers(limit=10_000)} <= ember_workers


def test_placement_group_and_job_rows(cluster):
    """The rows ``/api`` declares for placement groups and jobs (``schemas.py``) are what the
    endpoints return, with the values the cluster has."""
    ctx, pg_id = cluster["ctx"], cluster["pg"].id.hex()
    page = _api(cluster, "/api/placement_groups?filter=name=state-pg")
    PLACEMENT_GROUPS.page_model.model_validate(page)
    [row] = page["items"]
    assert set(row) == set(PLACEMENT_GROUPS.fields)
    assert (row["placement_group_id"], row["state"], row["strategy"]) == (pg_id, "CREATED", "PACK")
    assert row["bundles"] == [{"index": 0, "resources": {"CPU": 0.1}, "node_id": ctx.node_id}]
    assert row["job_id"] == ember.get_runtime_context().get_job_id()
    assert _api(cluster, f"/api/placement_groups/{pg_id}") == row
    jobs = _api(cluster, "/api/jobs/")
    TypeAdapter(list[JOBS.list_model]).validate_python(jobs)
    [job] = jobs
    assert list(job) == list(JOBS.fields)  # every declared field, in order
    assert (job["type"], job["status"], job["submission_id"]) == ("DRIVER", "RUNNING", None)
    assert job["driver_info"]["pid"] == str(os.getpid())
    assert _api(cluster, f"/api/jobs/{job['job_id']}") == job


def test_objects_and_summaries(cluster):
    blob_id = cluster["blob"].hex()
    refs = state.get_objects(blob_id)
    assert refs and {r.object_id for r in refs} == {blob_id} and len(blob_id) == 40
    assert refs[0].reference_type == "LOCAL_REFERENCE" and refs[0].object_size >= 200_000
    assert blob_id in {o.object_id for o in state.list_objects(limit=1000)}
    assert state.get_objects("ee" * 20) == []

    tasks = state.summarize_tasks()["cluster"]
    by_name = {k.rsplit(".", 1)[-1]: v for k, v in tasks["summary"].items()}
    assert by_name["square"]["state_counts"] == {"FINISHED": 4}
    assert by_name["boom"]["state_counts"] == {"FAILED": 1}
    assert list(by_name["held"]["state_counts"].values()) == [1]
    assert by_name["held"]["state_counts"] == {"RUNNING": 1}
    actors = state.summarize_actors()["cluster"]
    assert actors["summary"]["Counter"]["state_counts"] == {"ALIVE": 1}
    assert actors["total_actors"] == 1
    objects = state.summarize_objects()["cluster"]
    assert objects["total_objects"] >= 2 and objects["summary_by"] == "callsite"


def test_logs(cluster):
    ctx = cluster["ctx"]
    names = state.list_logs(node_id=ctx.node_id)
    assert "raylet.log" in names["raylet"] and names["worker_out"]
    actor = _counter_id(cluster)

    def lines() -> list[str]:
        return [x for x in state.get_log(actor_id=actor) if "counter-incremented" in x]

    assert wait_until(lines, timeout=20, interval=0.3, message="the actor's log line") == [
        "counter-incremented\n"
    ]
    pid = state.get_actor(actor).pid
    tail = list(state.get_log(node_id=ctx.node_id, pid=pid, tail=1))
    assert tail == ["counter-incremented\n"]
    with pytest.raises(state.StateApiException, match="pid"):
        list(state.get_log(node_id=ctx.node_id))


# -- the CLI ----------------------------------------------------------------------------------
def ember_cli(cluster, *args: str) -> tuple[int, str, str]:
    out = CliRunner().invoke(main, [*args, "--address", cluster["url"]])
    return out.exit_code, out.stdout, out.stderr


def test_cli_list_shows_full_ids_and_counts(cluster):
    code, out, err = ember_cli(
        cluster, "list", "tasks", "--filter", "state=FINISHED", "--limit", "2"
    )
    assert code == 0, err
    assert "Total: 2 of 6 matching" in out  # the actor's creation task too
    assert "Limit last 2 entries (Total 6)" in err
    finished = state.list_tasks(filters=[("state", "=", "FINISHED")], limit=2)
    for t in finished:  # every id whole: the task's, its job's, its node's
        assert t.task_id in out and t.parent_task_id in out and t.node_id in out
    code, out, _ = ember_cli(cluster, "list", "actors")
    row = next(line for line in out.splitlines() if "state-counter" in line)
    assert _counter_id(cluster) in row.split() and "ALIVE" in row.split()
    code, out, _ = ember_cli(cluster, "list", "objects", "--limit", "1000")
    assert cluster["blob"].hex() in out.split()
    code, out, _ = ember_cli(cluster, "list", "placement-groups")
    assert cluster["pg"].id.hex() in out.split()
    code, out, _ = ember_cli(
        cluster, "list", "tasks", "-f", "state!=finished", "-f", "STATE!=failed"
    )
    assert "Total: 1;" in out and "held" in out


def test_cli_formats_parse_back_to_the_same_rows(cluster):
    rows = [t.asdict() for t in state.list_tasks(limit=1000)]
    base = state.TaskState.list_columns(detail=False)
    expected = [{c: r[c] for c in base} for r in rows]
    code, out, err = ember_cli(cluster, "list", "tasks", "--format", "json", "--limit", "1000")
    assert code == 0, err
    assert json.loads(out) == expected
    code, out, _ = ember_cli(cluster, "list", "tasks", "--format", "yaml", "--limit", "1000")
    assert yaml.safe_load(out) == expected
    # --detail alone is YAML with every column, as Ray's.
    code, out, _ = ember_cli(cluster, "list", "actors", "--detail")
    (actor,) = yaml.safe_load(out)
    assert actor["actor_id"] == _counter_id(cluster) and actor["num_restarts"] == 0


def test_cli_get(cluster):
    actor = _counter_id(cluster)
    code, out, err = ember_cli(cluster, "get", "actors", actor)
    assert code == 0, err
    (row,) = yaml.safe_load(out)
    assert row["actor_id"] == actor and row["state"] == "ALIVE" and row["name"] == "state-counter"
    code, out, _ = ember_cli(cluster, "get", "actors", actor, "--format", "table")
    assert f"actor_id                                    {actor}" in out
    task = cluster["squares"][1].task_id().hex()
    code, out, _ = ember_cli(cluster, "get", "tasks", task, "--format", "json")
    (row,) = json.loads(out)
    assert row["task_id"] == task and row["state"] == "FINISHED" and row["events"]
    code, out, err = ember_cli(cluster, "get", "tasks", "ff" * 16)
    assert code == 1 and out == ""
    assert err == (
        f"ember: error: no task has the id or id prefix {'ff' * 16!r}; "
        "`ember list tasks` lists them\n"
    )


def test_cli_summary_and_errors(cluster):
    code, out, err = ember_cli(cluster, "summary", "tasks")
    assert code == 0, err
    square_line = next(line for line in out.splitlines() if " square " in line)
    assert square_line.split()[2:5] == ["NORMAL_TASK", "4", "4"]  # type, total, FINISHED
    code, out, _ = ember_cli(cluster, "summary", "actors", "--format", "json")
    assert json.loads(out)["cluster"]["summary"]["Counter"]["state_counts"] == {"ALIVE": 1}
    code, out, _ = ember_cli(cluster, "summary", "objects", "--format", "yaml")
    assert yaml.safe_load(out)["cluster"]["total_objects"] >= 2
    code, _, err = ember_cli(cluster, "list", "tasks", "--filter", "colour=red")
    assert code == 2 and "'colour' is not a filter key of tasks" in err and "task_id" in err
    code, _, err = ember_cli(cluster, "list", "tasks", "--filter", "oops")
    assert code == 2 and "KEY=VALUE" in err
    gone = CliRunner().invoke(main, ["list", "nodes", "--address", "http://127.0.0.1:9"])
    assert gone.exit_code == 1 and "could not reach the dashboard" in gone.stderr


def test_an_actor_and_a_group_made_a_moment_ago_are_listed_at_once(cluster):
    """Ray's state API answers from the GCS as of the call; the dashboard polls the GCS each
    second, so it polls again before such a listing (a Tune test saw one of two trials'
    actors missing right after fit)."""

    @ember.remote(num_cpus=0)
    class JustMade:
        def ping(self) -> int:
            return 1

    for i in range(3):
        actor = JustMade.options(name=f"just-made-{i}").remote()
        assert ember.get(actor.ping.remote(), timeout=30) == 1
        rows = state.list_actors(filters=[("name", "=", f"just-made-{i}")])
        assert [(a.name, a.state) for a in rows] == [(f"just-made-{i}", "ALIVE")]
        group = placement_group([{"CPU": 0.01}])
        assert group.wait(30)
        listed = {p.placement_group_id for p in state.list_placement_groups(limit=10000)}
        assert group.id.hex() in listed
        remove_placement_group(group)
        ember.kill(actor)
