"""Jobs under faults (issue 16): a job whose node dies ends FAILED saying so and leaves no
entrypoint process behind."""

from __future__ import annotations

import subprocess

import httpx
import pytest
from ember_test_utils import wait_until

pytestmark = pytest.mark.timeout(180)
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def _submit(http: httpx.Client, entrypoint: str, **fields) -> str:
    r = http.post("/api/jobs/", json={"entrypoint": entrypoint, **fields})
    assert r.status_code == 200, r.text
    return r.json()["submission_id"]


def _running(http: httpx.Client, sid: str, timeout: float = 60) -> dict:
    return wait_until(
        lambda: (j := http.get(f"/api/jobs/{sid}").json())["status"] == "RUNNING" and j,
        timeout,
        0.2,
        f"job {sid} to run",
    )


def _group(pgid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_a_job_whose_node_dies_fails_naming_the_death(cluster):
    worker = cluster.add_node(num_cpus=1, resources={"only_here": 1})
    http = httpx.Client(base_url=cluster.head_node.dashboard_url, timeout=60)
    try:
        # A grandchild too: the whole group must go, not only the shell.
        sid = _submit(http, "sleep 600 & sleep 600", entrypoint_resources={"only_here": 1})
        job = _running(http, sid)
        assert job["driver_node_id"] == worker.node_id.hex()
        pgid = job["driver_pid"]
        assert len(_group(pgid)) >= 2
        cluster.remove_node(worker, allow_graceful=False)
        job = wait_until(
            lambda: (j := http.get(f"/api/jobs/{sid}").json())["status"] in TERMINAL and j,
            30,
            0.2,
            "the job to end after its node died",
        )
        assert job["status"] == "FAILED", job
        assert job["error_type"] == "JOB_SUPERVISOR_ACTOR_DIED"
        assert f"node {worker.node_id.hex()}" in job["message"] and "died" in job["message"]
        wait_until(lambda: not _group(pgid), 10, 0.1, "the entrypoint's process group to be gone")
    finally:
        http.close()
