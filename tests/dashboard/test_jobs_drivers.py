"""Drivers are jobs (issue 16 item 5): a driver started by hand (``python script.py`` calling
``ember.init(address="auto")``) is listed by ``GET /api/jobs/`` as Ray lists it (type DRIVER,
its command line, RUNNING then SUCCEEDED, or FAILED when it was killed), and Ray's own
``ray job list`` reads it; a submitted job's driver shows once, as its SUBMISSION."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys

import ember
import httpx
import pytest
from ember.cluster_utils import Cluster
from ember_test_utils import assert_no_ember_children, wait_until
from test_ray_clients import RAY_PYTHON, _ray_env, _require_ray

pytestmark = pytest.mark.timeout(180)

DRIVER = """
import sys, ember
ember.init(address="auto")

@ember.remote
def square(x):
    return x * x

print("ready", ember.get(square.remote(7)), flush=True)
sys.stdin.readline()  # until the test lets it end
"""


@pytest.fixture
def head(tmp_path):
    if ember.is_initialized():
        ember.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    http = httpx.Client(base_url=c.head_node.dashboard_url, timeout=60)
    script = tmp_path / "by_hand.py"
    script.write_text(DRIVER)
    started: list[subprocess.Popen] = []

    def start_driver(*args: str) -> subprocess.Popen:
        # "auto" finds the head by its session under this temp dir, as on a real machine.
        env = {k: v for k, v in os.environ.items() if k not in ("EMBER_ADDRESS", "RAY_ADDRESS")}
        env["EMBER_TMPDIR"] = os.path.dirname(c.head_node.session_dir)
        p = subprocess.Popen(
            [sys.executable, str(script), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        started.append(p)
        assert p.stdout.readline().split() == ["ready", "49"]
        return p

    try:
        yield c, http, start_driver, str(script)
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
            p.wait(10)
        http.close()
        c.shutdown()
        assert_no_ember_children()


def _drivers(http: httpx.Client) -> list[dict]:
    return [j for j in http.get("/api/jobs/").json() if j["type"] == "DRIVER"]


def test_a_driver_started_by_hand_is_a_job(head):
    c, http, start_driver, script = head
    proc = start_driver("--flag", "two words")
    [job] = _drivers(http)  # the job manager's own driver is not listed
    assert job["submission_id"] is None and job["status"] == "RUNNING"
    assert job["entrypoint"] == shlex.join([sys.executable, script, "--flag", "two words"])
    assert job["driver_info"] == {
        "id": job["job_id"],
        "node_ip_address": "127.0.0.1",
        "pid": str(proc.pid),
    }
    assert job["driver_node_id"] == c.head_node.node_id.hex()
    assert job["start_time"] > 0 and job["end_time"] is None
    assert http.get(f"/api/jobs/{job['job_id']}").json() == job
    stop = http.post(f"/api/jobs/{job['job_id']}/stop")
    assert stop.status_code == 400 and "only submitted jobs" in stop.json()["detail"]

    # Ray's own CLI lists it.
    _require_ray()
    ray = subprocess.run(
        [str(RAY_PYTHON.with_name("ray")), "job", "list", "--address", str(http.base_url)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_ray_env(),
    )
    assert ray.returncode == 0, ray.stderr[-2000:]
    assert f"job_id='{job['job_id']}'" in ray.stdout and "JobType.DRIVER" in ray.stdout
    assert "status=<JobStatus.RUNNING: 'RUNNING'>" in ray.stdout

    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.wait(30) == 0
    ended = wait_until(
        lambda: (j := _drivers(http)[0])["status"] != "RUNNING" and j, 20, 0.1, "the driver's end"
    )
    assert ended["status"] == "SUCCEEDED" and ended["end_time"] >= ended["start_time"]
    assert ended["message"] is None and ended["job_id"] == job["job_id"]


def test_a_killed_driver_reads_failed_and_a_submitted_one_shows_once(head):
    _, http, start_driver, _ = head
    proc = start_driver()
    job_id = _drivers(http)[0]["job_id"]
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    killed = wait_until(
        lambda: (j := http.get(f"/api/jobs/{job_id}").json())["status"] != "RUNNING" and j,
        20,
        0.1,
        "the killed driver's end",
    )
    assert killed["status"] == "FAILED" and killed["error_type"] == "DRIVER_DISCONNECTED"
    assert "dropped before it ended its job" in killed["message"]

    r = http.post("/api/jobs/", json={"entrypoint": "python -c 'import ember; ember.init()'"})
    sid = r.json()["submission_id"]
    done = wait_until(
        lambda: (j := http.get(f"/api/jobs/{sid}").json())["status"] == "SUCCEEDED" and j,
        60,
        0.2,
        "the submitted job to succeed",
    )
    listed = http.get("/api/jobs/").json()
    assert [j["job_id"] for j in listed].count(done["job_id"]) == 1
    assert [(j["type"], j["submission_id"]) for j in listed] == [
        ("SUBMISSION", sid),
        ("DRIVER", None),
    ]
