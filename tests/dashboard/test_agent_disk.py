"""A disk full of logs (issue 4 §6): the agent says so in an error event naming the mount and
what to do, and the log endpoints keep serving.

As root, the node's temp_dir is a small tmpfs the test mounts and fills for real; elsewhere
(no mount allowed) the threshold is set above what the disk has free, which the agent cannot
tell apart from a full disk.
"""

from __future__ import annotations

import os
import subprocess
import tempfile

import ember
import httpx
import pytest
from ember_test_utils import wait_until

SIZE = 64 * 2**20
MIN_FREE = 16 * 2**20


@pytest.fixture
def small_disk():
    """A 64 MiB tmpfs (or None when this process may not mount one)."""
    mnt = tempfile.mkdtemp(prefix="ember-diskfull-", dir="/tmp")
    ok = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", mnt], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield mnt if ok else None
    finally:
        if ember.is_initialized():
            ember.shutdown()
        if ok:
            subprocess.run(["umount", "-l", mnt], check=False)
        os.rmdir(mnt)


def _events(http: httpx.Client, kind: str) -> list[dict]:
    r = http.get("/api/events", params={"filter": f"kind={kind}"})
    assert r.status_code == 200
    return r.json()["items"]


def test_a_full_log_disk_is_an_error_event_and_logs_still_serve(
    small_disk, ember_start, monkeypatch
):
    if small_disk is not None:
        monkeypatch.setenv("EMBER_AGENT_LOG_DISK_MIN_FREE", str(MIN_FREE))
        ctx = ember_start(num_cpus=1, temp_dir=small_disk)
    else:  # a threshold above the free space: "nearly full" as far as the agent can tell
        monkeypatch.setenv("EMBER_AGENT_LOG_DISK_MIN_FREE", str(2**60))
        ctx = ember_start(num_cpus=1)
    http = httpx.Client(base_url=ctx.dashboard_url, timeout=30)
    filler = os.path.join(ctx.session_dir, "filler.bin")
    try:
        node = wait_until(lambda: http.get("/api/nodes").json()["items"], 15, 0.2, "node")[0]
        if small_disk is not None:
            wait_until(
                lambda: (
                    (http.get(f"/api/nodes/{node['node_id']}").json()["metrics"])
                    .get("log_disk", {})
                    .get("low")
                    is False
                ),
                15,
                0.2,
                "a first sample with room to spare",
            )
            assert not _events(http, "LOG_DISK_FULL")
            free = os.statvfs(small_disk)
            room = free.f_bavail * free.f_frsize
            with open(filler, "wb") as f:  # leave about 4 MiB: below the threshold
                f.truncate(0)
                f.write(b"\0" * (room - 4 * 2**20))
        ev = wait_until(lambda: _events(http, "LOG_DISK_FULL"), 20, 0.3, "LOG_DISK_FULL")[0]
        assert ev["severity"] == "ERROR" and ev["node_id"] == node["node_id"]
        mount = small_disk if small_disk is not None else ev["message"].split("(")[1].split(")")[0]
        assert f"({mount})" in ev["message"]
        assert "logs may be truncated" in ev["message"]
        assert f"free space on {mount} or move temp_dir" in ev["message"]
        sample = http.get(f"/api/nodes/{node['node_id']}").json()["metrics"]["log_disk"]
        assert sample["low"] is True and sample["mount"] == mount
        # The log endpoints keep serving.
        with open(os.path.join(ctx.session_dir, "logs", "written-when-full.log"), "w") as f:
            f.write("still readable\n")
        listed = wait_until(
            lambda: (
                (
                    out := http.get("/api/logs", params={"filter": "name=written-when-full.log"})
                ).json()["total"]
                and out.json()
            ),
            15,
            0.2,
        )
        assert listed["items"][0]["size"] > 0
        params = {"node_id": node["node_id"], "name": "written-when-full.log"}
        r = http.get("/api/logs/tail", params=params)
        assert r.status_code == 200 and r.json()["lines"] == ["still readable"]
        assert len(_events(http, "LOG_DISK_FULL")) == 1  # once, not every sample
        if small_disk is not None:
            os.unlink(filler)
            ok = wait_until(lambda: _events(http, "LOG_DISK_OK"), 20, 0.3, "LOG_DISK_OK")[0]
            assert ok["severity"] == "INFO" and mount in ok["message"]
    finally:
        http.close()
        if os.path.exists(filler):
            os.unlink(filler)
