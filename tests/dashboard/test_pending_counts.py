"""Counts that say what is true: ``ember status`` gives the exact number of waiting tasks
beside the raylets' lease demands (``N+``, a lower bound), and a retry that is running
counts as running, not pending (``/api/cluster_status``, what the Overview reads)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import ember
import pytest
from ember_test_utils import wait_until

pytestmark = pytest.mark.timeout(120)


@ember.remote(num_cpus=2)
def hold(gate: str) -> None:
    while not os.path.exists(gate):
        time.sleep(0.02)


@ember.remote(num_cpus=1)
def one() -> int:
    return 1


@ember.remote(num_cpus=1, max_retries=2, retry_exceptions=True)
def fails_once_then_waits(marker: str, gate: str) -> str:
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("first attempt fails")
    while not os.path.exists(gate):
        time.sleep(0.02)
    return "second attempt"


def _counts(http) -> dict[str, int]:
    return http.get("/api/cluster_status").json()["tasks"]


def test_status_prints_the_exact_number_of_waiting_tasks(live, tmp_path):
    ctx, http, _ = live
    gate = str(tmp_path / "gate")
    blocker = hold.remote(gate)
    wait_until(lambda: _counts(http).get("RUNNING") == 1, 30, 0.1, "the blocker running")
    waiting = [one.remote() for _ in range(120)]
    wait_until(lambda: _counts(http).get("PENDING_NODE_ASSIGNMENT") == 120, 30, 0.1, "120 waiting")
    cli = os.path.join(os.path.dirname(sys.executable), "ember")

    def status() -> str | None:
        out = subprocess.run(
            [cli, "status", "--address", ctx.dashboard_url],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        return out if "pending tasks/actors" in out else None

    out = wait_until(status, 30, 0.5, "the demand in ember status")
    demands = out.split("Pending Demands:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert demands[0].startswith(" {CPU: 1}: ") and demands[0].endswith("+ pending tasks/actors")
    assert (
        demands[-1] == " Pending tasks (exact, every owner's queue): 120 (120 waiting for a node)"
    )
    open(gate, "w").close()
    assert ember.get(waiting, timeout=60) == [1] * 120
    ember.get(blocker)


def test_a_running_retry_counts_as_running(live, tmp_path):
    _, http, _ = live
    marker, gate = str(tmp_path / "marker"), str(tmp_path / "gate")
    ref = fails_once_then_waits.remote(marker, gate)
    task_id = ref.task_id().hex()

    def running_retry() -> dict | None:
        row = http.get(f"/api/tasks/{task_id}").json()
        return row if row.get("attempt") == 1 and row.get("state") == "RUNNING" else None

    row = wait_until(running_retry, 30, 0.1, "the retry reading RUNNING")
    counts = _counts(http)
    assert counts.get("RUNNING") == 1 and not counts.get("RETRYING"), counts
    assert row["attempt"] == 1
    open(gate, "w").close()
    assert ember.get(ref, timeout=30) == "second attempt"
