"""``/api/tune`` on a dashboard app without a cluster (a state fed as the history replays it):
bad queries are 422s naming the columns, stops need the cluster token like every request of
a reachable dashboard, and a dashboard without a cluster refuses to stop anything."""

from __future__ import annotations

import warnings

from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.state import DashboardState
from ember.dashboard.tune.store import store_of

with warnings.catch_warnings():  # FastAPI's TestClient warns on import (httpx's deprecations)
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def _state() -> DashboardState:
    state = DashboardState()
    rows = [
        {
            "trial_id": f"t{i}",
            "status": "RUNNING" if i % 2 else "TERMINATED",
            "config": {"lr": 10.0**-i},
            "metrics": {"loss": {"last": 1.0 / (i + 1), "min": 0.1, "max": 1.0}},
            "iterations": i,
        }
        for i in range(5)
    ]
    record = {"name": "e", "metric": "loss", "mode": "min", "status": "RUNNING", "chunks": [1]}
    store_of(state).apply({"exp": record, "chunks": {"0": rows}})
    return state


def test_queries_and_their_errors():
    with TestClient(create_app(DashboardContext(state=_state()))) as c:
        page = c.get("/api/tune/experiments/e/trials", params={"sort_by": "last/loss"}).json()
        assert [r["trial_id"] for r in page["items"]] == ["t4", "t3", "t2", "t1", "t0"]
        assert page["best_trial_id"] == "t4" and page["total"] == 5
        running = c.get("/api/tune/experiments/e/trials", params={"filter": "status=RUNNING"})
        assert [r["trial_id"] for r in running.json()["items"]] == ["t1", "t3"]
        bad = c.get("/api/tune/experiments/e/trials", params={"sort_by": "config/nope"})
        assert bad.status_code == 422 and "config/lr" in bad.text
        bad = c.get("/api/tune/experiments/e/trials", params={"filter": "loss=1"})
        assert bad.status_code == 422 and "last/loss" in bad.text
        curves = c.get("/api/tune/experiments/e/curves", params={"trial": "t9"})
        assert curves.status_code == 404 and "t9" in curves.text
        # No cluster behind this dashboard: nothing can be stopped, and it says so.
        stop = c.post("/api/tune/experiments/e/stop")
        assert stop.status_code == 405 and "no cluster" in stop.text


def test_stopping_needs_the_cluster_token():
    app = create_app(DashboardContext(state=_state()), token="s3cret")
    with TestClient(app) as c:
        r = c.post("/api/tune/experiments/e/trials/t1/stop", json={"reason": "x"})
        assert r.status_code == 401
        r = c.post(
            "/api/tune/experiments/e/trials/t1/stop",
            json={"reason": "x"},
            headers={"Authorization": "Bearer s3cret"},
        )
        assert r.status_code == 405  # through the token check; then: no cluster here
