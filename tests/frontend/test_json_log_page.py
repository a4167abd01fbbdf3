"""The Logs page reads JSON log lines (``EMBER_LOG_FORMAT=json``) as text: time, level,
component, node, message; its search highlights inside the message."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from browser_utils import open_page
from ember_test_utils import dashboard_url_in, head_cluster

pytestmark = pytest.mark.timeout(120)


def test_logs_page_shows_json_lines_as_text(browser, monkeypatch):
    monkeypatch.setenv("EMBER_LOG_FORMAT", "json")
    with head_cluster(prefix="emb-jsonpage-") as (_root, _port, started):
        url = dashboard_url_in(started.stdout + started.stderr)
        with urllib.request.urlopen(f"{url}/api/nodes", timeout=10) as resp:
            (node,) = json.load(resp)["items"]
        node_id = node["node_id"]
        page = browser.new_page()
        try:
            open_page(page, url, f"logs?node={node_id}&file=raylet.log&q=started")
            view = page.locator("[data-testid=log-lines]")
            view.locator("mark").first.wait_for()
            lines = view.inner_text().splitlines()
            assert not [ln for ln in lines if ln.startswith("{")], lines
            pattern = rf"\S+T\S+ INFO raylet \[node={node_id[:12]}\]: raylet started \(pid \d+\)"
            assert any(re.match(pattern, ln) for ln in lines), lines
            assert view.locator("mark").first.inner_text() == "started"
        finally:
            page.close()
