"""The dashboard's HTTP port closes a connection that sends no request within the
pre-authentication deadline (issue 19 §4): uvicorn alone kept such connections for good."""

from __future__ import annotations

import socket
import time
import urllib.parse

from ember import config


def test_idle_connections_to_the_dashboard_are_closed_at_the_deadline(live):
    ctx, http, _ = live
    url = urllib.parse.urlsplit(ctx.dashboard_url)
    socks = [socket.create_connection((url.hostname, url.port), timeout=5) for _ in range(5)]
    start = time.monotonic()
    try:
        for s in socks:
            s.settimeout(max(0.1, config.auth_deadline_seconds + 10 - (time.monotonic() - start)))
            try:
                assert s.recv(1024) == b""  # closed by the dashboard, nothing sent
            except ConnectionResetError:
                pass
    finally:
        for s in socks:
            s.close()
    took = time.monotonic() - start
    assert config.auth_deadline_seconds * 0.8 <= took < config.auth_deadline_seconds + 5
    # A request on a fresh connection is served as before.
    assert http.get("/api/version").status_code == 200
