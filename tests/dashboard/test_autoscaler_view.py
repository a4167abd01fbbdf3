"""The dashboard as a reader of the autoscaler's status record, in process: the record as the
GCS poll brings it (``apply_gcs_poll``, the function the live poller and the history replay
both call) -> ``/api/autoscaler/status``'s figures, the events and timeline marks of its
decisions (each once), Ray's ``autoscaler_*`` families on ``/metrics`` (checked by the real
``promtool``), and the record kept in and read back from the session's history; then the
same record put in a real node's GCS KV, read by its dashboard and by ``ember status``. The
real monitor's record is tested against a real AutoscalingCluster in
tests/frontend/test_autoscaler_views.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from autoscaler_status_record import NODE_B, encoded, record
from dashboard_state_fill import TestClient
from ember import global_state
from ember.cli.status import fetch, render, summarize
from ember.dashboard import history_reader
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.gcs_client import _autoscaler_record, apply_gcs_poll
from ember.dashboard.history_writer import HistoryWriter
from ember.dashboard.state import DashboardState
from ember_test_utils import wait_until
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diagnostics"))
from prometheus_server import tool  # noqa: E402


def _poll(st: DashboardState, raw: bytes | None) -> None:
    apply_gcs_poll(st, [], None, None, [], _autoscaler_record(raw))


def _samples(text: str) -> dict[tuple, float]:
    """{(sample name, sorted label pairs): value} of a /metrics text."""
    return {
        (smp.name, tuple(sorted(smp.labels.items()))): smp.value
        for fam in text_string_to_metric_families(text)
        for smp in fam.samples
    }


def _types(text: str) -> dict[str, str]:
    return {fam.name: fam.type for fam in text_string_to_metric_families(text)}


def _client(st: DashboardState, session_dir: str = "") -> TestClient:
    return TestClient(create_app(DashboardContext(state=st, session_dir=session_dir)))


def test_the_status_route_computes_what_the_config_view_shows() -> None:
    st = DashboardState()
    now = time.time()
    _poll(st, encoded(now))
    with _client(st) as c:
        s = c.get("/api/autoscaler/status").json()
    assert s["present"] is True and s["fresh"] is True and s["error"] is None
    types = {t["name"]: t for t in s["node_types_view"]}
    assert list(types) == ["head", "cpu_node"]  # the head first
    cpu = types["cpu_node"]
    assert (cpu["min_workers"], cpu["current"], cpu["max_workers"]) == (0, 1, 3)
    assert (cpu["pending"], cpu["failed"], cpu["idle"]) == (1, 1, 1)
    assert [i["instance_id"] for i in s["pending_launches"]] == ["fake-2"]
    [idle] = s["idle_timers"]
    assert idle["instance_id"] == "fake-1" and idle["node_id"] == NODE_B
    assert 19 <= idle["idle_for_s"] <= 25 and 35 <= idle["stops_in_s"] <= 41  # timeout 60 s
    assert s["failures"][0]["error"] == "the node did not join within 30 s"
    assert s["failures"][0]["instance_id"] == "fake-0"
    assert s["pending_resources"] == {"CPU": 2.0}  # the launching 2-CPU node
    # Masked again by the reader: the monitor left a token in the provider's config.
    config = s["record"]["config"]
    assert config["provider"]["api_token"] == "***"
    assert config["auth"] == {"ssh_user": "ember", "ssh_private_key": "***"}
    assert "s3cr3t" not in json.dumps(s)
    assert [p["total"] for p in s["sizes"]] == [2]


def test_each_decision_becomes_one_event_and_one_timeline_mark() -> None:
    st = DashboardState()
    now = time.time()
    _poll(st, encoded(now))
    _poll(st, encoded(now, time=now + 1))  # the next tick repeats the last 200 decisions
    later = record(now, time=now + 2)
    later["decisions"].append(
        {
            "time": now + 2,
            "action": "terminate",
            "node_type": "cpu_node",
            "instance_id": "fake-1",
            "count": 1,
            "reason": "idle for 60 s (idle_timeout_minutes 1)",
        }
    )
    _poll(st, json.dumps(later).encode())
    events = [e for e in st.events if e["source"] == "autoscaler"]
    assert [e["kind"] for e in events] == [
        "AUTOSCALER_LAUNCH",
        "AUTOSCALER_FAILED",
        "AUTOSCALER_LAUNCH",
        "AUTOSCALER_LAUNCH",
        "AUTOSCALER_TERMINATE",
    ]
    failed = events[1]
    assert failed["severity"] == "ERROR" and failed["time"] == now - 61
    assert failed["message"] == (
        "autoscaler failed to launch 1 cpu_node node (fake-0): the node did not join within 30 s"
    )
    assert events[-1]["message"] == (
        "autoscaler terminating 1 cpu_node node (fake-1): idle for 60 s (idle_timeout_minutes 1)"
    )
    with _client(st) as c:
        page = c.get("/api/events", params={"filter": "source=autoscaler"}).json()
        assert page["total"] == 5
        trace = c.get("/api/timeline").json()
    row = next(
        e["pid"]
        for e in trace
        if e.get("name") == "process_name" and e["args"]["name"] == "autoscaler: scaling decisions"
    )
    marks = [e for e in trace if e.get("ph") == "i"]
    assert len(marks) == 5 and {m["pid"] for m in marks} == {row}
    assert marks[-1]["name"] == "terminate cpu_node"
    assert marks[-1]["args"]["reason"] == "idle for 60 s (idle_timeout_minutes 1)"
    assert marks[-1]["ts"] == round((now + 2) * 1e6)


def test_autoscaler_families_while_the_record_is_fresh_and_promtool_accepts_ember_s() -> None:
    st = DashboardState()
    _poll(st, encoded(time.time()))
    with _client(st, "/tmp/session_2026_x") as c:
        ember_text = c.get("/metrics").text
        ray_text = c.get("/metrics", params={"compat": "ray"}).text
    # Ray's names and labels with ?compat=ray; Ember's (snake_case labels) on plain /metrics.
    for text, prefix, type_label, session in (
        (ray_text, "", "NodeType", {"SessionName": "session_2026_x"}),
        (ember_text, "ember_", "node_type", {}),
    ):
        got = _samples(text)

        def value(name: str, **labels: str) -> float:
            return got[prefix + name, tuple(sorted({**session, **labels}.items()))]  # noqa: B023

        cpu, head = {type_label: "cpu_node"}, {type_label: "head"}
        assert value("autoscaler_active_nodes", **cpu) == 1.0
        assert value("autoscaler_active_nodes", **head) == 1.0
        assert value("autoscaler_pending_nodes", **cpu) == 1.0
        assert value("autoscaler_recently_failed_nodes", **cpu) == 1.0
        assert value("autoscaler_started_nodes_total") == 2.0
        assert value("autoscaler_stopped_nodes_total") == 0.0
        assert value("autoscaler_failed_create_nodes_total") == 1.0
        assert value("autoscaler_running_workers") == 1.0
        assert value("autoscaler_cluster_resources", resource="CPU") == 3.0
        assert value("autoscaler_pending_resources", resource="CPU") == 2.0  # launching
        assert _types(text)[prefix + "autoscaler_started_nodes"] == "counter"
    # One family per name: the node table's stand-ins step aside for the record's.
    assert ray_text.count("# TYPE autoscaler_active_nodes ") == 1
    check = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=ember_text.encode(), capture_output=True
    )
    assert check.returncode == 0, check.stderr.decode() + check.stdout.decode()
    assert check.stdout + check.stderr == b""  # no lint either


def test_a_stale_or_foreign_record_is_said_so_and_leaves_metrics_as_without_one() -> None:
    st = DashboardState()
    _poll(st, encoded(time.time() - 3600))  # the monitor stopped an hour ago
    with _client(st) as c:
        s = c.get("/api/autoscaler/status").json()
        assert s["present"] is True and s["fresh"] is False and s["age_s"] >= 3600
        assert "autoscaler_started_nodes" not in c.get("/metrics").text
        assert "autoscaler_started_nodes" not in c.get("/metrics?compat=ray").text
        ray = c.get("/metrics", params={"compat": "ray"}).text
        assert "autoscaler_pending_nodes" in ray  # the stand-in, from the node table
        _poll(st, json.dumps(record(time.time(), version=7)).encode())
        s = c.get("/api/autoscaler/status").json()
    assert "version 7" in s["error"] and "reads version 1" in s["error"]
    empty = DashboardState()
    _poll(empty, None)
    with _client(empty) as c:
        s = c.get("/api/autoscaler/status").json()
    assert s["present"] is False and s["fresh"] is False and s["record"] is None


def test_the_history_keeps_the_record_the_chart_and_the_events(tmp_path: Path) -> None:
    """What ``ember dashboard --history`` shows of a stopped session: the record polled
    live, written by the history writer, read back by the replay."""
    live = DashboardState()
    writer = HistoryWriter(str(tmp_path), flush_s=0.05)
    live.recorder = writer.record
    now = time.time()
    first = record(now)
    second = record(now, time=now + 1)
    second["node_types"]["cpu_node"].update(running=2, pending=0)
    second["instances"][2].update(state="running", node_id="d4" * 28, ip="127.0.0.1")
    for rec in (first, second):
        if live.autoscaler.worth_recording(rec, time.time()):
            live.record("gcs", {"actors": [], "autoscaler": rec})
    assert not live.autoscaler.worth_recording(second, time.time())  # unchanged: not again
    writer.close()

    session = history_reader.load(str(tmp_path))
    with _client(session.state) as c:
        s = c.get("/api/autoscaler/status").json()
        events = c.get("/api/events", params={"filter": "source=autoscaler"}).json()
    assert s["present"] is True
    cpu = next(t for t in s["node_types_view"] if t["name"] == "cpu_node")
    assert cpu["current"] == 2 and cpu["pending"] == 0
    assert [p["total"] for p in s["sizes"]] == [2, 3]
    assert events["total"] == 4


def test_a_record_in_a_real_gcs_reaches_the_dashboard_and_ember_status(live) -> None:
    """The GCS path end to end on a real node: the record put in its KV (as the monitor
    puts it) is polled by its dashboard and read by ``ember status`` both ways."""
    ctx, http, _ = live
    body = {"namespace": "autoscaler", "key": b"status", "value": encoded(time.time())}
    global_state.require_worker().call_gcs_sync("kv_put", {**body, "overwrite": True}, 10.0)
    try:
        status = wait_until(
            lambda: (s := http.get("/api/autoscaler/status").json())["present"] and s,
            15,
            0.2,
            "the dashboard never read the record",
        )
        assert [i["instance_id"] for i in status["pending_launches"]] == ["fake-2"]
        gcs = render(summarize(fetch(ctx.address, os.path.dirname(ctx.session_dir))))
        assert gcs.startswith("======== Autoscaler status: ")
        assert " fake-2: cpu_node, launching" in gcs.splitlines()
        cli = subprocess.run(
            [sys.executable, "-m", "ember.cli.main", "status", "--address", ctx.dashboard_url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 0, cli.stderr
        assert " fake-2: cpu_node, launching" in cli.stdout.splitlines(), cli.stdout
    finally:
        global_state.require_worker().call_gcs_sync("kv_del", body, 10.0)
