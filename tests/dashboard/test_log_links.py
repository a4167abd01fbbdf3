"""Log endpoints never follow links (issue 19 §6): a link placed in a session's logs directory
(any job can make one) must not serve ``/etc/passwd`` or a secret of the session. A real
node: the agent indexes and reads the files, the dashboard serves them."""

from __future__ import annotations

import os

import pytest
from ember.agent.logs import LogDir
from ember.log_files import LogFileRefused, open_log
from ember_test_utils import wait_until

SECRET = "not-for-log-readers-0123456789"


def _listed(http, node_id: str) -> set[str]:
    rows = http.get("/api/logs", params={"filter": f"node_id={node_id}", "limit": 1000})
    return {r["name"] for r in rows.json()["items"]}


def _link(target: str, path: str) -> None:
    """``path`` becomes a symbolic link to ``target`` in one step (as a job could do it)."""
    tmp = path + ".tmp-link"
    os.symlink(target, tmp)
    os.replace(tmp, path)


def test_links_in_the_logs_directory_are_neither_listed_nor_served(live):
    ctx, http, node_id = live
    logs = os.path.join(ctx.session_dir, "logs")
    secret = os.path.join(ctx.session_dir, "secret_for_test")
    with open(secret, "w") as f:
        f.write(SECRET + "\n")
    _link("/etc/passwd", os.path.join(logs, "passwd-link.log"))
    _link(secret, os.path.join(logs, "secret-link.log"))
    os.link(secret, os.path.join(logs, "secret-hard.log"))
    with open(os.path.join(logs, "bait.log"), "w") as f:
        f.write("an ordinary line\n")
    # The index that lists bait.log was taken after the links were made: they are not in it.
    names = wait_until(lambda: "bait.log" in _listed(http, node_id) and _listed(http, node_id))
    assert not {"passwd-link.log", "secret-link.log", "secret-hard.log"} & names
    v0 = http.get("/api/v0/logs", params={"node_id": node_id}).json()["data"]["result"]
    assert "passwd-link.log" not in str(v0) and "secret-hard.log" not in str(v0)
    for name in ("passwd-link.log", "secret-hard.log"):
        r = http.get("/api/logs/tail", params={"node_id": node_id, "name": name})
        assert r.status_code == 404, r.text

    # A listed file replaced by a link after the agent indexed it: every endpoint refuses it,
    # with a 403 saying why, and nothing of the target comes back.
    _link("/etc/passwd", os.path.join(logs, "bait.log"))
    q = {"node_id": node_id, "name": "bait.log"}
    answers = [
        http.get("/api/logs/tail", params=q),
        http.get("/api/logs/download", params=q),
        http.get("/api/logs/follow", params={**q, "timeout": 1}),
        http.get("/api/logs/search", params={**q, "pattern": "root"}),
    ]
    for r in answers:
        assert r.status_code == 403, (r.request.url, r.status_code, r.text)
        assert "symbolic link" in r.json()["detail"]
        assert "root:" not in r.text
    # The search of every file skips the link (and the hard link) and finds no secret.
    r = http.get("/api/logs/search", params={"node_id": node_id, "pattern": "not-for-log"})
    assert r.status_code == 200 and SECRET not in r.text
    r = http.get("/api/logs/search", params={"node_id": node_id, "pattern": "root:"})
    assert r.status_code == 200 and "root:" not in r.text


def test_open_log_refuses_links_fifos_and_other_names(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    (logs / "ok.log").write_text("fine\n")
    os.symlink(outside, logs / "soft.log")
    os.link(outside, logs / "hard.log")
    os.mkfifo(logs / "pipe.log")
    os.symlink(logs, tmp_path / "logs-link")
    with open_log(str(logs), "ok.log") as f:
        assert f.read() == b"fine\n"
    for name, why in [
        ("soft.log", "symbolic link"),
        ("hard.log", "hard link"),
        ("pipe.log", "not a regular file"),
    ]:
        with pytest.raises(LogFileRefused, match=why):
            open_log(str(logs), name)
    with pytest.raises(LogFileRefused, match="link or not a directory"):
        open_log(str(tmp_path / "logs-link"), "ok.log")
    for name in ("../outside.txt", "..", "", ".hidden"):
        with pytest.raises(FileNotFoundError):
            open_log(str(logs), name)
    # The agent's index lists only what it would serve; its reads refuse the rest.
    log_dir = LogDir(str(logs))
    assert [f["name"] for f in log_dir.index()] == ["ok.log"]
    with pytest.raises(LogFileRefused):
        log_dir.read("soft.log", 0, 100)
    with pytest.raises(LogFileRefused):
        log_dir.tail("hard.log", 10)
