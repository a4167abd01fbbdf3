"""``/metrics`` read by Prometheus's own parser: names and units, bounded labels, the node and
cluster scopes, the service-discovery file, and the generated Grafana dashboards' queries
(every metric they plot is one ``/metrics`` serves)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import prometheus_server
import pytest
from ember.dashboard import grafana, prom_readings, prometheus
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.state import DashboardState
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

NODE = "ab" * 14
SAMPLE = {
    "cpu_percent": 25.0,
    "cpu_per_core": [20.0, 30.0],
    "num_cpus": 2,
    "load_avg": [0.5, 0.4, 0.3],
    "mem_total_bytes": 8e9,
    "mem_used_bytes": 2e9,
    "mem_available_bytes": 6e9,
    "mem_shared_bytes": 1e8,
    "disks": [{"mount": "/", "total_bytes": 1e11, "used_bytes": 4e10, "percent": 40.0}],
    "disk_read_bytes_per_s": 1000.0,
    "disk_write_bytes_per_s": 2000.0,
    "net_sent_bytes_per_s": 300.0,
    "net_recv_bytes_per_s": 400.0,
    "uptime_s": 1000.0,
    "object_store_used_bytes": 1e6,
    "object_store_capacity_bytes": 1e9,
    "object_store_objects": 3,
    "object_store_spilled_bytes": 5e8,
    "object_store_spilled_objects": 5,
    "object_store_spilled_bytes_total": 7e8,
    "object_store_restored_bytes_total": 2e8,
    "agent": {
        "in_dashboard": False,
        "cpu_percent": 1.5,
        "rss_bytes": 5e7,
        "sample_cpu_seconds": 0.25,
        "sample_seconds": 0.01,
        "task_events_buffered": 7,
        "task_events_dropped": 3,
    },
}


@pytest.fixture
def client(tmp_path):
    state = DashboardState()
    state.update_node(NODE, {"node_ip": "10.0.0.5", "is_head": True})
    state.node_metrics(NODE, time.time(), SAMPLE)
    state.set_workers(
        NODE,
        [
            {"pid": 11, "kind": "worker", "cpu_percent": 50.0, "rss_bytes": 1e8, "uss_bytes": 8e7},
            {"pid": 12, "kind": "worker", "cpu_percent": 25.0, "rss_bytes": 1e8, "uss_bytes": 8e7},
            {"pid": 13, "kind": "raylet", "cpu_percent": 2.0, "rss_bytes": 3e7, "uss_bytes": 2e7},
        ],
    )
    t = time.time()
    events = []
    for i in range(500):  # 500 distinct function names: more than the label bound
        tid = f"{i:032x}"
        events.append([tid, "PENDING_ARGS_AVAIL", t, 0, None])
        events.append(
            [tid, "FINISHED", t + 1, 0, {"function": f"mod.fn{i}", "pid": 11, "node_id": NODE}]
        )
    state.add_task_events(NODE, "01", events)
    state.update_actor({"actor_id": "c1" * 16, "class_name": "Worker", "state": "ALIVE"})
    state.update_actor({"actor_id": "c2" * 16, "class_name": "Worker", "state": "DEAD"})
    # cluster_info as the GCS answers it: resources and demands per node (a dead node's are
    # stale and left out), the actors it could not place, the placement groups.
    gcs_node = {
        "node_id": NODE,
        "state": "ALIVE",
        "resources_total": {"CPU": 2.0, "object_store_memory": 1e9},
        "resources_available": {"CPU": 0.5, "object_store_memory": 1e9},
        "pending_demands": [
            {"shape": {"CPU": 1.0}, "count": 4, "infeasible": False},
            {"shape": {"GPU": 8.0}, "count": 1, "infeasible": True},
        ],
    }
    dead_node = {
        "node_id": "cd" * 14,
        "state": "DEAD",
        "resources_total": {"CPU": 64.0},
        "resources_available": {"CPU": 64.0},
        "pending_demands": [{"shape": {"CPU": 1.0}, "count": 9, "infeasible": False}],
    }
    state.cluster = {
        "nodes": [gcs_node, dead_node],
        "pending_actors": [{"actor_id": "c3" * 16, "class_name": "Big", "resources": {"CPU": 4}}],
        "placement_groups": [
            {"placement_group_id": "p1", "state": "CREATED"},
            {"placement_group_id": "p2", "state": "CREATED"},
            {"placement_group_id": "p3", "state": "PENDING"},
        ],
    }
    ctx = DashboardContext(state=state, host="127.0.0.1", port=8265, session_dir=str(tmp_path))
    return TestClient(create_app(ctx).fastapi), ctx


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(fams: dict, name: str, **labels) -> float:
    family = fams[name.removesuffix("_total")] if name not in fams else fams[name]
    for s in family.samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no sample {name}{labels}")


def test_metrics_parse_with_units_and_values(client):
    c, _ = client
    resp = c.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    fams = _families(resp.text)
    assert all(name.startswith("ember_") for name in fams)
    assert _value(fams, "ember_node_cpu_percent", node_id=NODE, ip="10.0.0.5") == 25.0
    assert _value(fams, "ember_node_memory_used_bytes", node_id=NODE) == 2e9
    assert _value(fams, "ember_node_disk_used_bytes", mount="/") == 4e10
    assert _value(fams, "ember_node_cpu_core_percent", core="1") == 30.0
    assert _value(fams, "ember_object_store_capacity_bytes") == 1e9
    assert _value(fams, "ember_object_store_spilled_bytes") == 5e8
    assert _value(fams, "ember_object_store_spilled_objects") == 5
    assert _value(fams, "ember_object_store_bytes_spilled_total") == 7e8
    assert _value(fams, "ember_object_store_bytes_restored_total") == 2e8
    assert _value(fams, "ember_component_cpu_percent", component="worker") == 75.0
    assert _value(fams, "ember_component_processes", component="worker") == 2
    assert _value(fams, "ember_actors", state="ALIVE", class_name="Worker") == 1
    # Demands: the live node's queue and the parked actor (4 CPUs: no node has that many).
    assert _value(fams, "ember_pending_demands", shape="GPU:8", infeasible="true") == 1
    assert _value(fams, "ember_pending_demands", shape="CPU:1", infeasible="false") == 4
    assert _value(fams, "ember_pending_demands", shape="CPU:4", infeasible="true") == 1
    assert _value(fams, "ember_cluster_resources", resource="CPU") == 2.0
    assert _value(fams, "ember_cluster_resources_available", resource="CPU") == 0.5
    assert _value(fams, "ember_placement_groups", state="CREATED") == 2
    assert _value(fams, "ember_placement_groups", state="PENDING") == 1
    assert _value(fams, "ember_placement_groups", state="REMOVED") == 0
    assert _value(fams, "ember_node_cpus", node_id=NODE) == 2
    assert _value(fams, "ember_tasks_finished_total") == 500
    assert _value(fams, "ember_tasks_failed_total") == 0
    assert fams["ember_tasks_finished"].type == "counter"
    assert _value(fams, "ember_agent_resident_memory_bytes") == 5e7
    assert _value(fams, "ember_agent_info", node_id=NODE, process="own") == 1
    assert _value(fams, "ember_agent_sample_cpu_seconds_total", node_id=NODE) == 0.25
    assert _value(fams, "ember_agent_task_events_buffered", node_id=NODE) == 7
    assert _value(fams, "ember_agent_task_events_dropped_total", node_id=NODE) == 3
    assert _value(fams, "ember_dashboard_task_events_ingested_total") == 1000
    assert fams["ember_dashboard_dropped"].type == "counter"
    assert _value(fams, "ember_dashboard_resident_memory_bytes") > 10 * 2**20


def test_function_names_are_bounded(client):
    c, _ = client
    fams = _families(c.get("/metrics").text)
    samples = [s for s in fams["ember_tasks"].samples if s.labels["state"] == "FINISHED"]
    assert len(samples) == prometheus.MAX_LABEL_VALUES
    assert sum(s.value for s in samples) == 500  # nothing lost: the tail adds up in "other"
    other = next(s for s in samples if s.labels["name"] == prometheus.OTHER)
    assert other.value == 500 - (prometheus.MAX_LABEL_VALUES - 1)


def test_node_and_cluster_scopes(client):
    c, _ = client
    node = _families(c.get(f"/metrics?node_id={NODE}").text)
    cluster = _families(c.get("/metrics?scope=cluster").text)
    assert "ember_node_cpu_percent" in node and "ember_tasks" not in node
    assert "ember_tasks" in cluster and "ember_node_cpu_percent" not in cluster
    missing = c.get("/metrics?node_id=feedface")
    assert missing.status_code == 404 and "feedface" in missing.json()["detail"]
    bad = c.get("/metrics?scope=everything")
    assert bad.status_code == 422 and "scope" in bad.text


def test_service_discovery_file(client, tmp_path):
    _, ctx = client
    path = prometheus.write_service_discovery(ctx)
    assert path == str(tmp_path / prometheus.SD_FILE)
    groups = json.loads(Path(path).read_text())
    assert groups[0] == {"targets": ["127.0.0.1:8265"], "labels": {"__param_scope": "cluster"}}
    assert groups[1]["targets"] == ["127.0.0.1:8265"]
    assert groups[1]["labels"]["__param_node_id"] == NODE
    assert groups[1]["labels"]["ember_node_ip"] == "10.0.0.5"
    # Each node's target has its own instance (Ray's panels plot by instance).
    assert groups[1]["labels"]["instance"] == f"10.0.0.5:{NODE[:8]}"
    # A dashboard bound on every interface names the head node's address instead.
    ctx.host = "0.0.0.0"
    assert prometheus.service_discovery(ctx)[0]["targets"] == ["10.0.0.5:8265"]


def _sample_types(text: str) -> dict[str, str]:
    """{sample name: its family's type} of what ``/metrics`` serves samples for."""
    out = {}
    for fam in _families(text).values():
        for sample in fam.samples:
            out[sample.name] = fam.type
    return out


def _call_arguments(expr: str, functions: tuple[str, ...]) -> list[str]:
    """The whole argument text of each call to one of ``functions`` in a PromQL expression."""
    args = []
    for m in re.finditer(rf"\b({'|'.join(functions)})\(", expr):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            i += 1
        args.append(expr[m.end() : i - 1])
    return args


@pytest.mark.parametrize("ray_names", [False, True], ids=["ember-names", "ray-names"])
def test_grafana_dashboards_rate_only_counters(client, ray_names):
    """Every ``rate``/``irate``/``increase`` in the generated Grafana dashboards is over a
    counter (over a gauge it would read a falling count as resets), and every metric any
    panel plots is one ``/metrics`` serves (``?compat=ray`` for Ray's names)."""
    c, _ = client
    types = _sample_types(c.get("/metrics" + ("?compat=ray" if ray_names else "")).text)
    names = r"\b(?:ray|autoscaler)_[a-z0-9_]+" if ray_names else r"\bember_[a-z0-9_]+"
    dashboards = [grafana.dashboard(b, ray_names) for b in grafana.boards(ray_names)]
    exprs = [t["expr"] for d in dashboards for p in d["panels"] for t in p["targets"]]
    assert len(exprs) >= (15 if ray_names else 30)
    rated = 0
    for expr in exprs:
        for arg in _call_arguments(expr, ("rate", "irate", "increase")):
            rated_names = re.findall(names, arg)
            assert rated_names, f"rate over no metric of the set: {expr}"
            for name in rated_names:
                assert types.get(name) == "counter", f"{name} is {types.get(name)}: {expr}"
                rated += 1
        used = set(re.findall(names, expr))
        assert used and used <= set(types), (expr, used - set(types))
    assert rated >= (0 if ray_names else 6)  # finished, failed, dropped, ingested, agents, store
    for d in dashboards:
        assert {v["name"] for v in d["templating"]["list"]} == {"datasource", "node"}
    assert len({d["uid"] for d in dashboards}) == len(dashboards)


def test_call_arguments_finds_nested_calls():
    expr = 'sum by (x) (rate(a_total{k="v"}[1m])) / increase(b_total[5m]) + irate((c_total)[1m])'
    assert _call_arguments(expr, ("rate", "irate", "increase")) == [
        'a_total{k="v"}[1m]',
        "b_total[5m]",
        "(c_total)[1m]",
    ]


def test_ray_compatible_set(client, tmp_path):
    c, ctx = client
    ctx.state.cluster["nodes"][0]["resources_total"]["CPU_group_0_" + "ab" * 16] = 1.0
    resp = c.get("/metrics?compat=ray")
    assert resp.status_code == 200
    fams = _families(resp.text)
    assert all(name.startswith(("ray_", "autoscaler_")) for name in fams), sorted(fams)
    session = tmp_path.name
    samples = [s for f in fams.values() for s in f.samples]
    assert all(s.labels["SessionName"] == session for s in samples if "SessionName" in s.labels)
    assert all("SessionName" in s.labels for s in samples if s.name.startswith("ray_node"))
    node = {"NodeId": NODE, "ip": "10.0.0.5", "IsHeadNode": "true"}
    assert _value(fams, "ray_node_cpu_count", **node) == 2
    assert _value(fams, "ray_node_cpu_utilization", **node) == 25.0
    assert _value(fams, "ray_node_mem_used", **node) == 2e9
    assert _value(fams, "ray_node_mem_total", **node) == 8e9
    assert _value(fams, "ray_node_disk_usage", **node) == 4e10
    assert _value(fams, "ray_node_disk_free", **node) == 6e10
    assert _value(fams, "ray_object_store_memory", Location="MMAP_SHM") == 1e6
    assert _value(fams, "ray_object_store_memory", Location="SPILLED") == 5e8
    assert _value(fams, "ray_resources", Name="CPU", State="USED", NodeId=NODE) == 1.5
    assert _value(fams, "ray_resources", Name="CPU", State="AVAILABLE") == 0.5
    # A placement group's own resources are left out (one name per group and bundle).
    assert {s.labels["Name"] for s in fams["ray_resources"].samples} == {
        "CPU",
        "object_store_memory",
    }
    assert _value(fams, "ray_component_cpu_percentage", Component="workers") == 75.0
    assert _value(fams, "ray_component_rss_mb", Component="raylet") == 30.0
    assert _value(fams, "ray_component_mem_shared_bytes", Component="workers") == 4e7
    finished = [s for s in fams["ray_tasks"].samples if s.labels["State"] == "FINISHED"]
    assert sum(s.value for s in finished) == 500 and {s.labels["IsRetry"] for s in finished} == {
        "0"
    }
    assert _value(fams, "ray_actors", Name="Worker", State="ALIVE", Source="gcs") == 1
    assert _value(fams, "ray_actors", Name="Worker", State="DEAD", Source="gcs") == 1
    assert _value(fams, "ray_actors", Name="Worker", State="ALIVE", Source="executor") == 1
    assert _value(fams, "ray_placement_groups", State="CREATED") == 2
    assert _value(fams, "ray_cluster_active_nodes", node_type="head") == 1
    assert _value(fams, "autoscaler_active_nodes", NodeType="worker") == 0
    assert _value(fams, "autoscaler_cluster_resources", resource="CPU") == 2
    # Waiting: four 1-CPU leases and the parked 4-CPU actor; one 8-GPU lease.
    assert _value(fams, "autoscaler_pending_resources", resource="CPU") == 8
    assert _value(fams, "autoscaler_pending_resources", resource="GPU") == 8


def test_ray_compatible_scopes(client):
    c, _ = client
    node = _families(c.get(f"/metrics?compat=ray&node_id={NODE[:6]}").text)
    cluster = _families(c.get("/metrics?compat=ray&scope=cluster").text)
    assert "ray_node_mem_used" in node and "ray_tasks" not in node
    assert "ray_tasks" in cluster and "ray_node_mem_used" not in cluster
    bad = c.get("/metrics?compat=prometheus")
    assert bad.status_code == 422 and "compat" in bad.text


def test_missing_promtool_skips_here_and_fails_in_ci(monkeypatch):
    monkeypatch.setattr(prometheus_server.shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="scripts/dev.sh setup"):
        prometheus_server.tool("promtool")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(
        pytest.fail.Exception, match="promtool is missing: run scripts/dev.sh setup"
    ):
        prometheus_server.tool("promtool")


def test_infeasible_means_no_live_node_could_hold_it():
    """A raylet flags a shape its own node cannot hold; another live node may hold it, and a
    dead node's size does not count."""
    small = {"node_id": "a", "state": "ALIVE", "resources_total": {"CPU": 2.0}}
    big = {"node_id": "b", "state": "ALIVE", "resources_total": {"CPU": 64.0}}
    dead = {"node_id": "c", "state": "DEAD", "resources_total": {"GPU": 8.0}}
    small["pending_demands"] = [
        {"shape": {"CPU": 32.0}, "count": 2, "infeasible": True},
        {"shape": {"GPU": 1.0, "CPU": 0}, "count": 1, "infeasible": True},
    ]
    st = SimpleNamespace(
        cluster={
            "nodes": [small, big, dead],
            "pending_actors": [{"resources": {"CPU": 128.0}}, {"resources": {"CPU": 8.0}}],
        }
    )
    got = [(d.shape, d.count, d.infeasible) for d in prom_readings.pending_demands(st)]
    assert got == [
        ({"CPU": 32.0}, 2, False),
        ({"GPU": 1.0}, 1, True),
        ({"CPU": 128.0}, 1, True),
        ({"CPU": 8.0}, 1, False),
    ]
