"""Fixtures for the dashboard's tests: an app over a state filled through the same ingestion
calls the agents' stream makes (``AgentHub.ingest``), served in-process by TestClient."""

from __future__ import annotations

import pytest
from dashboard_state_fill import TestClient, fill
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.state import DashboardState


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
