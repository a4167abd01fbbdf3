"""The Jobs API (``/api/jobs/``, ``/api/packages/``) against a real cluster head: entrypoints
run as drivers of the cluster, end in the state, exit code and message users read, are
stopped with their whole process group, and reserve their entrypoint resources."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import ember
import httpx
import pytest
from dashboard_state_fill import TestClient
from ember.cluster_utils import Cluster
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.state import DashboardState
from ember_test_utils import assert_no_ember_children, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diagnostics"))
from prometheus_server import tool  # noqa: E402

PROGRAM = (
    "import os, ember; ember.init(); "
    "print('MARK', ember.get(ember.put(41)) + 1, os.environ.get('GREETING'), flush=True)"
)


@pytest.fixture(scope="module")
def head():
    if ember.is_initialized():
        ember.shutdown()
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2},
        env={"EMBER_JOB_PACKAGE_MAX_BYTES": str(1024 * 1024)},
    )
    http = httpx.Client(base_url=c.head_node.dashboard_url, timeout=60)
    try:
        yield c, http
    finally:
        http.close()
        c.shutdown()
        assert_no_ember_children()


def _submit(http: httpx.Client, entrypoint: str, **fields) -> str:
    r = http.post("/api/jobs/", json={"entrypoint": entrypoint, **fields})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["job_id"] == body["submission_id"]
    return body["submission_id"]


def _ended(http: httpx.Client, sid: str, timeout: float = 60) -> dict:
    def done():
        job = http.get(f"/api/jobs/{sid}").json()
        return job if job["status"] in ("SUCCEEDED", "FAILED", "STOPPED") else None

    return wait_until(done, timeout, 0.2, f"job {sid} to end")


def test_program_succeeds_with_env_vars_and_its_logs(head):
    _, http = head
    sid = _submit(
        http,
        f"python -c {shlex.quote(PROGRAM)}",
        runtime_env={"env_vars": {"GREETING": "hello-env"}},
        metadata={"owner": "tests"},
    )
    assert sid.startswith("raysubmit_") and len(sid) == len("raysubmit_") + 16
    job = _ended(http, sid)
    assert job["status"] == "SUCCEEDED", job
    assert job["driver_exit_code"] == 0
    assert job["message"] == "Job finished successfully."
    assert job["metadata"] == {"owner": "tests"}
    assert job["end_time"] >= job["start_time"] > 0
    assert http.get(f"/api/jobs/{sid}/logs").json()["logs"] == "MARK 42 hello-env\n"
    # The entrypoint's driver registered its job: the submission answers to its job id too.
    assert job["job_id"] and job["driver_info"]["id"] == job["job_id"]
    assert http.get(f"/api/jobs/{job['job_id']}").json()["submission_id"] == sid
    assert sid in [j["submission_id"] for j in http.get("/api/jobs/").json()]


def test_failing_entrypoint_is_failed_with_its_exit_code(head):
    _, http = head
    sid = _submit(http, "echo about to fail; exit 3", submission_id="my-failing-job")
    assert sid == "my-failing-job"
    job = _ended(http, sid)
    assert job["status"] == "FAILED"
    assert job["driver_exit_code"] == 3
    assert "failed with exit code 3" in job["message"]
    assert "about to fail" in job["message"]
    again = http.post("/api/jobs/", json={"entrypoint": "true", "submission_id": sid})
    assert again.status_code == 400 and "already exists" in again.json()["detail"]
    assert http.get("/api/jobs/no-such-job").status_code == 404


def test_stop_ends_the_process_group_and_cpus_are_reserved(head):
    _, http = head
    # Two CPUs for a job that spawns a grandchild: the node has none left while it runs.
    sid = _submit(http, "sleep 600 & sleep 600", entrypoint_num_cpus=2)
    job = wait_until(
        lambda: (j := http.get(f"/api/jobs/{sid}").json())["status"] == "RUNNING" and j,
        30,
        0.1,
        "the job to run",
    )
    pgid = job["driver_pid"]
    # The guard (job_guard.py, the group's leader), the shell and its sleeps.
    wait_until(lambda: len(_group(pgid)) >= 3, 10, 0.05, "the entrypoint's processes")
    status = wait_until(
        lambda: (
            (s := http.get("/api/cluster_status").json())["resources"]["available"].get("CPU") == 0
            and s
        ),
        10,
        0.2,
        "the job's CPUs to be reserved",
    )
    assert status["resources"]["total"]["CPU"] == 2
    waiting = _submit(http, "echo never", entrypoint_num_cpus=1)
    assert http.delete(f"/api/jobs/{sid}").status_code == 400  # not ended: refused

    assert http.post(f"/api/jobs/{sid}/stop").json() == {"stopped": True}
    job = http.get(f"/api/jobs/{sid}").json()
    assert job["status"] == "STOPPED" and job["message"] == "Job was intentionally stopped."
    wait_until(lambda: not _group(pgid), 10, 0.1, "the job's process group to be gone")
    assert http.post(f"/api/jobs/{sid}/stop").json() == {"stopped": False}
    # The CPUs are free: the job that waited for one runs now.
    assert _ended(http, waiting)["status"] == "SUCCEEDED"
    assert http.get(f"/api/jobs/{waiting}/logs").json()["logs"] == "never\n"
    assert http.delete(f"/api/jobs/{sid}").json() == {"deleted": True}
    assert http.get(f"/api/jobs/{sid}").status_code == 404


def test_tail_streams_lines_until_the_end(head):
    _, http = head
    sid = _submit(http, "for i in 1 2 3; do echo line$i; sleep 0.3; done")
    base = str(http.base_url).rstrip("/").replace("http", "ws", 1)
    url = f"{base}/api/jobs/{sid}/logs/tail"
    from websockets.sync.client import connect

    got = ""
    with connect(url) as ws:
        for message in ws:
            got += message
    assert got == "line1\nline2\nline3\n"
    assert http.get(f"/api/jobs/{sid}").json()["status"] == "SUCCEEDED"


def test_last_bytes_gives_the_end_from_a_line_start(head):
    """``?last_bytes=N`` on the log and its tail: the lines of the last N bytes, after a
    line naming what was left out; a bad value is refused naming the parameter."""
    _, http = head
    sid = _submit(http, "seq 1 1000")  # 3,893 bytes
    _ended(http, sid)
    r = http.get(f"/api/jobs/{sid}/logs", params={"last_bytes": 20})
    # The last 20 bytes start inside "996"; the first whole line after is "997".
    assert r.json()["logs"] == (
        "[ember: the first 3876 bytes of this log are left out]\n997\n998\n999\n1000\n"
    )
    assert r.headers["X-Ember-Logs-Left-Out"] == "3876"
    assert http.get(f"/api/jobs/{sid}/logs", params={"last_bytes": 10**6}).json()["logs"] == (
        "".join(f"{i}\n" for i in range(1, 1001))
    )
    assert http.get(f"/api/jobs/{sid}/logs", params={"last_bytes": -1}).status_code == 422
    base = str(http.base_url).rstrip("/").replace("http", "ws", 1)
    from websockets.exceptions import ConnectionClosedError
    from websockets.sync.client import connect

    with connect(f"{base}/api/jobs/{sid}/logs/tail?last_bytes=20") as ws:
        got = "".join(ws)
    assert got == "[ember: the first 3876 bytes of this log are left out]\n997\n998\n999\n1000\n"
    with (
        pytest.raises(ConnectionClosedError) as e,
        connect(f"{base}/api/jobs/{sid}/logs/tail?last_bytes=lots") as ws,
    ):
        ws.recv(timeout=10)
    assert e.value.rcvd.code == 1008 and "last_bytes" in e.value.rcvd.reason


def test_packages_upload_validation_and_limit(head):
    _, http = head
    name = "_ray_pkg_0123abcd.zip"
    assert http.get(f"/api/packages/gcs/{name}").status_code == 404
    assert (
        http.put(f"/api/packages/gcs/{name}", content=b"PK\x05\x06" + bytes(18)).status_code == 200
    )
    assert http.get(f"/api/packages/gcs/{name}").status_code == 200
    for bad in (".hidden", "a..b", "%2E%2E"):
        r = http.put(f"/api/packages/gcs/{bad}", content=b"x")
        assert r.status_code in (400, 404), (bad, r.status_code)
    assert http.put("/api/packages/s3/x.zip", content=b"x").status_code == 400
    big = http.put("/api/packages/gcs/_ray_pkg_big.zip", content=bytes(2 * 1024 * 1024))
    assert big.status_code == 413
    detail = big.json()["detail"]
    assert "2.0 MiB" in detail and "limit of 1 MiB" in detail and "excludes" in detail


def test_jobs_by_state_in_metrics(head):
    _, http = head
    text = http.get("/metrics").text
    lines = [line for line in text.splitlines() if line.startswith("ember_jobs{")]
    assert 'ember_jobs{state="SUCCEEDED"}' in " ".join(lines)
    check = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=text.encode(), capture_output=True
    )
    assert check.returncode == 0, check.stderr.decode() + check.stdout.decode()


def test_jobs_need_the_token_off_loopback():
    app = create_app(DashboardContext(state=DashboardState(), host="0.0.0.0"), token="s3cret")
    with TestClient(app) as c:
        assert c.post("/api/jobs/", json={"entrypoint": "true"}).status_code == 401
        assert c.delete("/api/jobs/x").status_code == 401
        assert c.post("/api/jobs/x/stop").status_code == 401
        assert c.put("/api/packages/gcs/x.zip", content=b"x").status_code == 401
        authed = c.get("/api/jobs/", headers={"Authorization": "Bearer s3cret"})
        assert authed.status_code == 503  # past the token: no GCS in this test's dashboard


def _group(pgid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]
