"""Ray's state API (``/api/v0/...``) in process: its envelope, its filters (before the limit,
``=`` and ``!=``, typed, case-insensitive), its errors and its summaries, over a state filled
as the agents fill it (``dashboard_state_fill``). Ray's real clients: ``test_ray_clients``."""

from __future__ import annotations

import pytest
from dashboard_state_fill import NODE

# fill(): 30 actors (every 10th from the 9th DEAD, a third "Other", the rest "Counter"),
# 300 tasks ("rare" ones FAILED, the rest "common" FINISHED), one node, one worker.
N_ACTORS, N_DEAD, N_OTHER = 30, 3, 10


def _get(client, path: str, **params):
    r = client.get(path, params=params)
    return r.status_code, r.json()


def _rows(client, path: str, **params):
    status, body = _get(client, path, **params)
    assert status == 200 and body["result"] is True and body["msg"] == "", body
    return body["data"]["result"]


def _filters(*triples):
    keys, preds, values = zip(*triples, strict=True)
    return {
        "filter_keys": list(keys),
        "filter_predicates": list(preds),
        "filter_values": list(values),
    }


def test_envelope_and_counts(client):
    out = _rows(client, "/api/v0/actors", limit=5)
    assert set(out) == {
        "total",
        "num_after_truncation",
        "num_filtered",
        "result",
        "partial_failure_warning",
        "warnings",
    }
    assert out["total"] == out["num_after_truncation"] == out["num_filtered"] == N_ACTORS
    assert len(out["result"]) == 5
    # Without detail, Ray's list columns only; with it, every column.
    assert set(out["result"][0]) == {
        "actor_id",
        "class_name",
        "state",
        "job_id",
        "name",
        "node_id",
        "pid",
        "ray_namespace",
    }
    full = _rows(client, "/api/v0/actors", limit=1, detail="true")["result"][0]
    assert {"death_cause", "num_restarts", "is_detached", "required_resources"} <= set(full)


def test_filters_apply_before_the_limit(client):
    # The dead actors are spread through the table: a limit applied first would miss them.
    out = _rows(client, "/api/v0/actors", limit=2, **_filters(("state", "=", "DEAD")))
    assert out["total"] == N_ACTORS and out["num_filtered"] == N_DEAD
    assert len(out["result"]) == 2 and {r["state"] for r in out["result"]} == {"DEAD"}


def test_not_equal_and_several_filters_and(client):
    out = _rows(client, "/api/v0/actors", limit=100, **_filters(("state", "!=", "DEAD")))
    assert out["num_filtered"] == N_ACTORS - N_DEAD
    both = _rows(
        client,
        "/api/v0/actors",
        **_filters(("class_name", "=", "Other"), ("state", "!=", "DEAD")),
    )
    assert both["num_filtered"] == len(both["result"]) > 0
    assert all(r["class_name"] == "Other" and r["state"] != "DEAD" for r in both["result"])


def test_text_filters_ignore_case_and_integers_are_read_as_integers(client):
    assert _rows(client, "/api/v0/actors", **_filters(("state", "=", "alive")))["num_filtered"] == (
        N_ACTORS - N_DEAD
    )
    (one,) = _rows(client, "/api/v0/actors", **_filters(("pid", "=", "1003")))["result"]
    assert one["pid"] == 1003 and one["actor_id"] == f"{3:032x}"
    node = _rows(client, "/api/v0/nodes", **_filters(("is_head_node", "=", "true")))
    assert [n["node_id"] for n in node["result"]] == [NODE]


@pytest.mark.parametrize(
    "params, named",
    [
        (_filters(("nope", "=", "x")), "nope"),
        (_filters(("state", "~", "ALIVE")), "~"),
        (_filters(("pid", "=", "many")), "pid"),
        ({"filter_keys": ["state"], "filter_values": ["ALIVE"]}, "same length"),
        ({"limit": "lots"}, "limit"),
        ({"limit": 100_000}, "limit"),
    ],
)
def test_bad_queries_are_refused_in_rays_envelope(client, params, named):
    status, body = _get(client, "/api/v0/actors", **params)
    assert status == 400
    assert body["result"] is False and named in body["msg"]


def test_get_by_id_is_a_filter_on_the_id_column(client):
    actor_id = f"{7:032x}"
    out = _rows(client, "/api/v0/actors", detail="true", **_filters(("actor_id", "=", actor_id)))
    (row,) = out["result"]
    assert row["actor_id"] == actor_id and row["class_name"] == "Counter"
    dead = _rows(
        client, "/api/v0/actors", detail="true", **_filters(("actor_id", "=", f"{9:032x}"))
    )
    cause = dead["result"][0]["death_cause"]["actor_died_error_context"]
    assert cause["error_message"] == "killed"


def test_tasks_rows_and_filters(client):
    out = _rows(client, "/api/v0/tasks", limit=3, **_filters(("state", "=", "FAILED")))
    assert out["total"] == 300 and out["num_filtered"] == 3
    assert {r["name"] for r in out["result"]} == {"rare"}
    assert {r["error_type"] for r in out["result"]} == {"TASK_EXECUTION_EXCEPTION"}
    # A task id (any case) is looked up; other filters narrow what the columns kept.
    task_id = f"{107:032x}"
    (one,) = _rows(client, "/api/v0/tasks", **_filters(("task_id", "=", task_id.upper())))["result"]
    assert one["task_id"] == task_id and one["name"] == "rare"
    mixed = _rows(
        client,
        "/api/v0/tasks",
        **_filters(("func_or_class_name", "!=", "common"), ("attempt_number", "=", "0")),
    )
    assert mixed["num_filtered"] == 3 and {r["state"] for r in mixed["result"]} == {"FAILED"}
    none = _rows(client, "/api/v0/tasks", **_filters(("worker_pid", "!=", "11")))
    assert none["num_filtered"] == 0 and none["total"] == 300
    detail = _rows(client, "/api/v0/tasks", limit=1, detail="true")["result"][0]
    assert detail["worker_pid"] == 11 and detail["end_time_ms"] is not None
    assert [e["state"] for e in detail["events"]][0] == "PENDING_ARGS_AVAIL"


def test_summaries(client):
    tasks = _rows(client, "/api/v0/tasks/summarize")
    cluster = tasks["result"]["node_id_to_summary"]["cluster"]
    assert cluster["summary"]["rare"]["state_counts"] == {"FAILED": 3}
    assert cluster["summary"]["common"]["state_counts"] == {"FINISHED": 297}
    assert cluster["total_tasks"] == 300 and cluster["summary_by"] == "func_name"
    failed_only = _rows(client, "/api/v0/tasks/summarize", **_filters(("state", "=", "FAILED")))
    assert set(failed_only["result"]["node_id_to_summary"]["cluster"]["summary"]) == {"rare"}
    actors = _rows(client, "/api/v0/actors/summarize")["result"]["node_id_to_summary"]["cluster"]
    assert actors["total_actors"] == N_ACTORS
    assert sum(actors["summary"]["Other"]["state_counts"].values()) == N_OTHER


def test_every_list_answers_the_envelope(client):
    for resource in (
        "actors",
        "tasks",
        "nodes",
        "workers",
        "objects",
        "placement_groups",
        "jobs",
        "runtime_envs",
        "cluster_events",
    ):
        out = _rows(client, f"/api/v0/{resource}", limit=1000)
        assert out["num_filtered"] == len(out["result"]) == out["total"]
    # No GCS behind this app: the jobs list says why it is empty instead of failing.
    assert "GCS" in _rows(client, "/api/v0/jobs")["partial_failure_warning"]


def test_logs_listing_by_category(client):
    out = client.get("/api/v0/logs", params={"node_ip": "10.0.0.1"}).json()
    assert out["result"] is True and out["data"]["result"] == {
        "raylet": ["raylet.log", "raylet.log.1"],
        "worker_err": ["worker-" + "ab" * 14 + "-11.err"],
    }
    refused = client.get("/api/v0/logs").json()
    assert refused["result"] is False and "node" in refused["msg"]


def test_version_has_ember_and_ray_fields(client):
    v = client.get("/api/version").json()
    assert v["version"] == "4" and v["ember_version"] and v["api"] == 1
    assert tuple(int(x) for x in v["ray_version"].split(".")[:2]) >= (2, 0)


def test_other_methods_on_unknown_paths_are_404(client):
    for method in ("post", "put", "delete", "patch"):
        assert getattr(client, method)("/api/v0/nosuch").status_code == 404
        assert getattr(client, method)("/no/such/page").status_code == 404
    assert client.post("/api/nodes").status_code == 404
