"""Final states of tasks whose drivers come and go, on a head started as users start it:
the tasks of a SIGKILLed driver (one running, one that can never be placed) end as FAILED
with Ray's WORKER_DIED once its job is over, and its worker goes; 20 drivers running 2,000
tasks each at once leave every one of the 40,000 task rows FINISHED, nothing dropped."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import urllib.request

import psutil
from ember_test_utils import head_cluster, wait_until

KILLED_DRIVER = textwrap.dedent(
    """
    import sys, time
    import ember

    ember.init(address="auto", temp_dir=sys.argv[1])

    @ember.remote
    def stuck():
        time.sleep(600)

    @ember.remote(resources={"no_such_thing": 1})
    def never():
        return 0

    a, b = stuck.remote(), never.remote()
    print(a.task_id().hex(), b.task_id().hex(), flush=True)
    time.sleep(600)
    """
)

BUSY_DRIVER = textwrap.dedent(
    """
    import sys
    import ember

    ember.init(address="auto", temp_dir=sys.argv[1])

    @ember.remote
    def f(i):
        return i

    n = int(sys.argv[2])
    assert sum(ember.get([f.remote(i) for i in range(n)])) == n * (n - 1) // 2
    ember.shutdown()
    """
)


def _get(url: str, path: str) -> dict:
    with urllib.request.urlopen(url + path, timeout=30) as r:
        return json.load(r)


def _task(url: str, task_id: str) -> dict | None:
    q = f"/api/v0/tasks?detail=true&filter_keys=task_id&filter_predicates=%3D&filter_values={task_id}"
    rows = _get(url, q)["data"]["result"]["result"]
    return rows[0] if rows else None


def _state_counts(url: str) -> dict[str, int]:
    result = _get(url, "/api/v0/tasks/summarize")["data"]["result"]["result"]
    counts: dict[str, int] = {}
    for row in result["node_id_to_summary"]["cluster"]["summary"].values():
        for state, n in row["state_counts"].items():
            counts[state] = counts.get(state, 0) + n
    return counts


def _dashboard(head: subprocess.CompletedProcess) -> str:
    return re.search(r"Dashboard: (http://[0-9.:]+)", head.stdout).group(1)


def test_tasks_of_killed_and_busy_drivers_end_in_their_true_state(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_DASHBOARD_JOB_END_GRACE", "1")  # the dashboard reads it
    with head_cluster("--num-cpus", "2", "--dashboard-port", "0") as (root, _port, head):
        url = _dashboard(head)
        script = tmp_path / "killed_driver.py"
        script.write_text(KILLED_DRIVER)
        driver = subprocess.Popen(
            [sys.executable, str(script), root], stdout=subprocess.PIPE, text=True
        )
        try:
            running_id, infeasible_id = driver.stdout.readline().split()
            running = wait_until(
                lambda: (r := _task(url, running_id)) and r["state"] == "RUNNING" and r,
                30,
                0.1,
                "the driver's task RUNNING",
            )
            wait_until(
                lambda: (
                    (r := _task(url, infeasible_id)) and r["state"] == "PENDING_NODE_ASSIGNMENT"
                ),
                30,
                0.1,
                "the infeasible task pending",
            )
            driver.send_signal(signal.SIGKILL)
            driver.wait(10)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait(10)
        for task_id in (running_id, infeasible_id):
            row = wait_until(
                lambda t=task_id: (r := _task(url, t)) and r["state"] == "FAILED" and r,
                30,
                0.2,
                "the dead driver's task FAILED",
            )
            assert row["error_type"] == "WORKER_DIED"
            assert "as driver exits" in row["error_message"]
            assert row["job_id"] in row["error_message"]
        wait_until(lambda: not psutil.pid_exists(running["worker_pid"]), 30, 0.2, "its worker gone")

        # 20 drivers x 2,000 tasks at once: every row ends FINISHED, none dropped.
        busy = tmp_path / "busy_driver.py"
        busy.write_text(BUSY_DRIVER)
        drivers = [subprocess.Popen([sys.executable, str(busy), root, "2000"]) for _ in range(20)]
        assert [d.wait(300) for d in drivers] == [0] * 20
        want = {"FINISHED": 40_000, "FAILED": 2}
        seen: list[dict[str, int]] = [{}]

        def settled() -> bool:
            seen[0] = _state_counts(url)
            return seen[0] == want

        wait_until(settled, 60, 0.5, lambda: f"{want} task rows (last seen: {seen[0]})")
        status = _get(url, "/api/cluster_status")
        assert status["tasks"] == want
        assert not any(status["dropped"].values()), status["dropped"]
