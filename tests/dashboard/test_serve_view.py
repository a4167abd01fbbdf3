"""The Serve view and Serve's metric families from known request-metrics records (the format
of serve/request_metrics.py), through the dashboard's real app: the computed rates and
latency percentiles, and ``/metrics`` in Ray's and Ember's names (Ember's passing
``promtool``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

from dashboard_state_fill import TestClient
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.serve.recorded import record_poll, recorded_of
from ember.dashboard.serve.view import ServeMetrics, quantile, totals, window_figures
from ember.dashboard.state import DashboardState
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diagnostics"))
from prometheus_server import tool  # noqa: E402

BOUNDS = [1, 2, 5, 10, 20, 50, 100]


def _series(count: int, errors: int, buckets: list[int], **labels: object) -> dict:
    return {
        "route": "/hello",
        "app": "app1",
        "method": "",
        "status": 0,
        "count": count,
        "errors": errors,
        "sum_ms": 7.0 * count,
        "buckets": buckets,
        **labels,
    }


def _record(t: float, r1: dict, r2: dict | None, proxy_ok: int, proxy_500: int) -> dict:
    replicas = {
        "app1#Hello#a": {
            "app": "app1",
            "deployment": "Hello",
            "actor_name": "SERVE_REPLICA::app1#Hello#a",
            "ongoing": 2,
            "routes": {"/hello": r1},
        }
    }
    if r2 is not None:
        replicas["app1#Hello#b"] = {
            "app": "app1",
            "deployment": "Hello",
            "ongoing": 0,
            "routes": {"/hello": r2},
        }
    ok = _series(proxy_ok, 0, [0, 0, 0, proxy_ok, 0, 0, 0, 0], method="GET", status=200)
    bad = _series(proxy_500, proxy_500, [0, 0, 0, 0, proxy_500, 0, 0, 0], method="GET", status=500)
    return {
        "time": t,
        "buckets_ms": BOUNDS,
        "proxy": {"node_id": "n1", "routes": {"GET 200 /hello": ok, "GET 500 /hello": bad}},
        "replicas": replicas,
    }


def test_quantile_interpolates_inside_the_bucket() -> None:
    # 100 requests: 50 in (0, 1], 40 in (1, 2], 10 in (5, 10]
    counts = [50, 40, 0, 10, 0, 0, 0, 0]
    assert quantile(0.5, BOUNDS, counts) == 1.0
    assert quantile(0.9, BOUNDS, counts) == 2.0
    assert abs(quantile(0.95, BOUNDS, counts) - 7.5) < 1e-9
    assert quantile(0.5, BOUNDS, [0] * 8) is None
    assert quantile(0.99, BOUNDS, [0, 0, 0, 0, 0, 0, 0, 5]) == 100.0  # past the last bound


def test_rates_and_percentiles_over_the_window_from_known_counters() -> None:
    m = ServeMetrics()
    t0 = 1000.0
    # replica a: 100 requests before the window; 300 more (60 in (5,10], 240 in (10,20]) in
    # the 10 s that follow, 30 of them errors; replica b started between the samples (120).
    m.add(_record(t0, _series(100, 0, [0, 0, 0, 100, 0, 0, 0, 0]), None, 100, 0))
    m.add(_record(t0, _series(999, 0, [0] * 8), None, 0, 0))  # the same record again: ignored
    m.add(
        _record(
            t0 + 10,
            _series(400, 30, [0, 0, 0, 160, 240, 0, 0, 0]),
            _series(120, 0, [0, 0, 120, 0, 0, 0, 0, 0]),
            300,
            5,
        )
    )
    assert len(m.samples) == 2
    f = window_figures(list(m.samples), 30.0)[("app1", "Hello")]
    assert f["requests"] == 420
    assert f["rate"] == 42.0
    assert f["error_rate"] == 3.0
    # 420 in the window: 120 in (2,5], 60 in (5,10], 240 in (10,20]
    assert abs(f["p50_ms"] - (10 + 10 * (210 - 180) / 240)) < 1e-9
    assert abs(f["p99_ms"] - (10 + 10 * (415.8 - 180) / 240)) < 1e-9


def test_the_view_route_and_the_families_in_both_name_sets() -> None:
    st = DashboardState()
    now = time.time()
    st.serve.add(_record(now - 10, _series(100, 0, [0, 0, 0, 100, 0, 0, 0, 0]), None, 100, 0))
    st.serve.add(_record(now, _series(400, 30, [0, 0, 0, 400, 0, 0, 0, 0]), None, 390, 10))
    app = create_app(DashboardContext(state=st, session_dir="/tmp/session_2026_s"))
    with TestClient(app) as c:
        view = c.get("/api/serve/view").json()
        ember_text = c.get("/metrics").text
        ray_text = c.get("/metrics", params={"compat": "ray"}).text
    # no GCS in this dashboard: no status record, so no applications; the figures are kept
    assert view["running"] is False and view["applications"] == []
    assert view["metrics_time"] == now
    for text, ray in ((ray_text, True), (ember_text, False)):
        got = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        }
        extra = {"SessionName": "session_2026_s"} if ray else {}

        def v(ray_name: str, ember_name: str, **labels: str) -> float:
            name = "ray_" + ray_name if ray else "ember_" + ember_name  # noqa: B023
            return got[name, tuple(sorted({**labels, **extra}.items()))]  # noqa: B023

        http = {"route": "/hello", "method": "GET", "application": "app1"}
        n = "serve_num_http_requests_total"
        assert v(n, n, status_code="200", **http) == 390
        assert v(n, n, status_code="500", **http) == 10
        n = "serve_num_http_error_requests_total"
        assert v(n, n, error_code="500", **http) == 10
        ms, s = "serve_http_request_latency_ms", "serve_http_request_latency_seconds"
        assert v(ms + "_count", s + "_count", status_code="200", **http) == 390
        # (10, 20] ms: not under the 10 ms bound, all under the 20 ms one
        le10, le20 = ("10.0", "20.0") if ray else ("0.01", "0.02")
        assert v(ms + "_bucket", s + "_bucket", status_code="500", le=le10, **http) == 0
        assert v(ms + "_bucket", s + "_bucket", status_code="500", le=le20, **http) == 10
        rep = {"deployment": "Hello", "replica": "app1#Hello#a", "application": "app1"}
        n = "serve_deployment_request_counter_total"
        assert v(n, "serve_deployment_requests_total", route="/hello", **rep) == 400
        ms = "serve_deployment_processing_latency_ms"
        s = "serve_deployment_processing_latency_seconds"
        assert v(ms + "_count", s + "_count", route="/hello", **rep) == 400
        total = v(ms + "_sum", s + "_sum", route="/hello", **rep)
        assert abs(total - (2800 if ray else 2.8)) < 1e-9
        n = "serve_replica_processing_queries"
        assert v(n, n, **rep) == 2
    check = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=ember_text.encode(), capture_output=True
    )
    assert check.returncode == 0, check.stderr.decode() + check.stdout.decode()
    assert check.stdout + check.stderr == b""  # no lint either


def test_a_stale_record_leaves_metrics_without_serve_families() -> None:
    st = DashboardState()
    st.serve.add(_record(time.time() - 60, _series(1, 0, [1] + [0] * 7), None, 1, 0))
    with TestClient(create_app(DashboardContext(state=st))) as c:
        assert "serve_" not in c.get("/metrics").text


def test_a_replaced_replica_stays_in_the_totals_and_the_rate_counts_its_last_requests() -> None:
    m = ServeMetrics()
    t0 = 2000.0
    # a and b handled 100 and 50; then a died after 20 more (its last collected counts, 120,
    # are in "retired") and its replacement c handled 30
    m.add(
        _record(
            t0,
            _series(100, 0, [0, 0, 0, 100, 0, 0, 0, 0]),
            _series(50, 5, [0, 0, 0, 50, 0, 0, 0, 0]),
            0,
            0,
        )
    )
    later = _record(t0 + 10, _series(30, 0, [0, 0, 0, 30, 0, 0, 0, 0]), None, 0, 0)
    later["replicas"]["app1#Hello#c"] = later["replicas"].pop("app1#Hello#a")
    later["replicas"]["app1#Hello#b"] = {
        "app": "app1",
        "deployment": "Hello",
        "routes": {"/hello": _series(50, 5, [0, 0, 0, 50, 0, 0, 0, 0])},
    }
    later["retired"] = {"app1": {"Hello": _series(120, 0, [0, 0, 0, 120, 0, 0, 0, 0])}}
    m.add(later)
    total = totals(m.latest())[("app1", "Hello")]
    assert (total["count"], total["errors"]) == (200, 5)
    f = window_figures(list(m.samples), 30.0)[("app1", "Hello")]
    assert f["requests"] == 50 and f["rate"] == 5.0  # a's last 20 and c's 30


def test_serve_records_reach_the_history_and_a_shutdown_keeps_the_last_status() -> None:
    live, replayed = DashboardState(), DashboardState()
    written: list[tuple[str, dict]] = []
    live.recorder = lambda kind, body: written.append((kind, body))
    kv = {b"status": b'{"applications": {"a": {"status": "RUNNING"}}}', b"decisions": b"[]"}

    async def kv_get(namespace: str, key: bytes) -> bytes | None:
        assert namespace == "serve"
        return kv.get(key)

    rec = _record(100.0, _series(1, 0, [1] + [0] * 7), None, 1, 0)
    asyncio.run(record_poll(live, kv_get, rec, 100.0))
    asyncio.run(record_poll(live, kv_get, {**rec, "time": 101.0}, 101.0))  # nothing moved
    idle = {**rec, "time": 111.0}
    asyncio.run(record_poll(live, kv_get, idle, 111.0))  # idle, but 10 s on: recorded
    kv.clear()  # serve.shutdown() deletes the controller's records
    asyncio.run(record_poll(live, kv_get, None, 112.0))
    assert [sorted(body) for _, body in written] == [
        ["decisions", "metrics", "status"],
        ["metrics"],
        ["stopped"],
    ]
    for _, body in written:
        recorded_of(replayed).apply(replayed, body)
    got = recorded_of(replayed)
    assert got.status == {"applications": {"a": {"status": "RUNNING"}}}
    assert got.stopped == 112.0 and replayed.serve.latest()["time"] == 111.0
