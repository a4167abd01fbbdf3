"""Fixtures for the dashboard's tests: an app over a state filled through the same ingestion
calls the agents' stream makes (``AgentHub.ingest``), served in-process by TestClient; and a
real node with its dashboard, for the tests that read what the agents stream."""

from __future__ import annotations

import ember
import httpx
import pytest
from dashboard_state_fill import TestClient, fill
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.state import DashboardState
from ember_test_utils import assert_no_ember_children, wait_until


@pytest.fixture
def state() -> DashboardState:
    st = DashboardState()
    fill(st)
    return st


@pytest.fixture
def client(state: DashboardState):
    app = create_app(DashboardContext(state=state))
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def live():
    """A real 2-CPU node per test module: ``(context, HTTP client on its dashboard, node id)``,
    yielded once the node's agent has reported the node."""
    if ember.is_initialized():
        ember.shutdown()
    ctx = ember.init(num_cpus=2, dashboard_port=0)
    http = httpx.Client(base_url=ctx.dashboard_url, timeout=60)
    node = wait_until(lambda: http.get("/api/nodes").json()["items"], 15, 0.2, "the node")[0]
    yield ctx, http, node["node_id"]
    http.close()
    ember.shutdown()
    assert_no_ember_children()
