"""``ember.init(dashboard_host="0.0.0.0")``: the embedded node's dashboard, reachable from
other hosts, needs a token, and its own agent still streams to it (its hub stays on
loopback), so the node's tasks reach the API."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import ember
import pytest
from ember_test_utils import wait_until


def _get(url: str, token: str | None) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
        return json.load(r)


def test_embedded_dashboard_off_loopback_needs_a_token_and_gets_its_agent(_module_node_cleanup):
    if ember.is_initialized():
        ember.shutdown()
    ctx = ember.init(num_cpus=1, dashboard_host="0.0.0.0")
    try:

        @ember.remote
        def marker_task_off_loopback():
            return 1

        assert ember.get(marker_task_off_loopback.remote(), timeout=60) == 1
        url = ctx.dashboard_url.rstrip("/")
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get(f"{url}/api/version", None)
        assert refused.value.code == 401
        with open(os.path.join(ctx.session_dir, "dashboard_token")) as f:
            token = f.read().strip()

        def task_listed():
            rows = _get(f"{url}/api/tasks?limit=10", token)["items"]
            return [r for r in rows if "marker_task_off_loopback" in json.dumps(r)]

        wait_until(task_listed, timeout=30, message="the task to reach the dashboard")
        nodes = _get(f"{url}/api/nodes", token)
        assert nodes["total"] == 1
    finally:
        ember.shutdown()
