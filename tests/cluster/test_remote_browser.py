"""The dashboard from another machine in a browser (issue 28, item 1): headless Chromium in a
second network namespace opens ``http://NODE_IP:PORT/?token=...`` (the head's dashboard on
every interface, so it wants the token), lands on the URL without the token, and reads every
page of the app with this cluster's values on it, with no 401 in its network log and the live
stream open; the login form without a token; a wrong token; and the link followed from another
site's page (SameSite=Strict withholds the cookie from that navigation's redirect)."""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from ember import config
from remote_host import HOLDER, PROBE, WORKLOAD_TASKS, in_other_host, other_host, remote_head  # noqa: F401

pytestmark = pytest.mark.timeout(300)

FRONTEND_TESTS = Path(__file__).resolve().parents[1] / "frontend"


def check_browser_setup() -> None:
    """tests/frontend's rule (skip on a developer's machine, fail in CI, naming the fix)."""
    import importlib.util

    sys.path.insert(0, str(FRONTEND_TESTS))  # its conftest imports browser_utils
    try:
        spec = importlib.util.spec_from_file_location(
            "frontend_conftest", FRONTEND_TESTS / "conftest.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(FRONTEND_TESTS))
    module.check_browser_setup()


def _pages(c: dict) -> list[list[str]]:
    """Each page of the app, and a value of this cluster it shows (route, element, text)."""
    return [
        ["tasks", "main", PROBE],  # first: the login form's and the other site's check too
        ["overview", "[data-testid=overview-stats]", "Actors alive\n2"],
        ["machines", "[data-testid=nodes-table]", c["ip"]],
        ["actors", "[data-testid=actors-table]", HOLDER],
        ["jobs", "[data-testid=jobs-table]", "RUNNING"],
        # The workers that ran the workload (the probe's may host an actor after it, so 2 or
        # 3); the driver's row holds its submit_task slices.
        [
            "timeline",
            "[data-testid=timeline-count]",
            f"{c['workers']} worker{'s' * (c['workers'] != 1)} · 1 driver",
        ],
        ["logs", "[data-testid=log-files]", "raylet.log"],
        ["memory", "main", str(c["driver_pid"])],
        ["metrics", "[data-testid=metrics-node]", c["node_id"][:8]],
    ]


def _task_workers(url: str, token: str) -> int:
    """How many worker processes ran the workload's tasks, as the dashboard says."""
    req = urllib.request.Request(
        f"{url}/api/tasks?limit=1000", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return len({t["pid"] for t in json.load(r)["items"] if t["pid"]})


def test_a_browser_on_another_host_reads_every_page(remote_head, tmp_path):  # noqa: F811
    check_browser_setup()
    c = dict(remote_head)
    url = f"http://{c['ip']}:{c['dash_port']}"
    c["workers"] = _task_workers(url, c["token"])
    spec = {
        "url": url,
        "token": c["token"],
        "pages": _pages(c),
        "frontend_dir": str(FRONTEND_TESTS),
    }
    probe = Path(__file__).with_name("remote_browser_probe.py")
    # Chromium wants a writable home; the namespace's private mount keeps it off the machine's.
    done = in_other_host(
        c["ns"],
        [sys.executable, str(probe), json.dumps(spec)],
        240,
        cwd=str(tmp_path),
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)

    # `ember start` printed the link the browser opened.
    assert f"From another machine's browser: {url}/?token={c['token']}" in c["printed"]
    link = seen["link"]
    assert link["landed"] == f"{url}/", link["landed"]  # the token left the address bar
    assert link["status"] == 200 and "?token=" in link["redirected_from"]
    (cookie,) = link["cookies"]
    assert cookie["name"] == f"ember_token_{c['dash_port']}" and cookie["value"] == c["token"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
    unread = {r: p["shown"] for r, p in link["pages"].items() if not p["ok"]}
    assert not unread, unread
    closed = [r for r, p in link["pages"].items() if not p["stream"]]
    assert not closed, f"the live stream did not open on {closed}"
    assert link["unauthorized"] == [], link["unauthorized"]
    # The live stream over a WebSocket too, on the cookie alone (no token in its URL).
    assert link["ws_stream"] and link["websockets"], link["websockets"]
    assert link["ws_closed"] == [], "the WebSocket was refused (4401) or dropped"
    assert all("token=" not in u for u in link["websockets"]), link["websockets"]
    assert link["signed_out_shows_form"], "a page whose cookie stopped working did not reload"

    form = seen["form"]
    assert form["form_status"] == 401 and "sign in" in form["form_title"]
    assert form["landed"] == f"{url}/#/tasks", form["landed"]  # back where the user asked
    assert form["page"]["ok"] and form["stream"], form

    wrong = seen["wrong"]
    assert wrong["status"] == 401 and not wrong["redirected_from"], wrong
    assert wrong["alert"] == "The token in the link is not this dashboard's token."
    assert wrong["typed_alert"] == "That is not this dashboard's token."
    assert wrong["cookies"] == [] and wrong["typed_cookies"] == []

    other_site = seen["cross_site"]
    assert other_site["landed"] == f"{url}/#/tasks", other_site
    assert other_site["page"]["ok"], json.dumps(other_site)


def test_a_stranger_signing_in_gets_a_few_kb_and_the_deadline(remote_head):  # noqa: F811
    """The sign-in form's post is read to 4 KiB within the pre-authentication deadline: a
    peer that sends its body slowly gets the form (401) when the deadline passes."""
    c = remote_head
    body_start = b"token="
    head = (
        "POST /login HTTP/1.1\r\nHost: {ip}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n"
    ).format(ip=c["ip"])
    start = time.monotonic()
    with socket.create_connection((c["ip"], c["dash_port"]), timeout=30) as s:
        s.sendall(head.encode() + body_start)  # then nothing more
        reply = b""
        while b"</html>" not in reply:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    took = time.monotonic() - start
    assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
    assert b"too large or too slow" in reply and b"set-cookie" not in reply.lower()
    assert config.auth_deadline_seconds * 0.8 <= took < config.auth_deadline_seconds + 10, took
