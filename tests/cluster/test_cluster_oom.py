"""The memory monitor of a node that is not the driver's: the raylet asks the task's owner
over TCP which task it kills, and the task fails or runs again as on one node. The usage
comes from the monitor's test hook (a file), on the worker node only."""

from __future__ import annotations

import os
import time

import ember
import psutil
import pytest
from ember import config
from ember.exceptions import OutOfMemoryError
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from ember_test_utils import process_gone, wait_until


@ember.remote
def hold(name: str, gate: str, started_dir: str) -> tuple[str, int]:
    with open(os.path.join(started_dir, f"{name}-{os.getpid()}"), "w"):
        pass
    deadline = time.monotonic() + 60
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    return name, os.getpid()


def _started(tmp, name: str) -> int:
    def pids():
        found = [int(f.rsplit("-", 1)[1]) for f in os.listdir(tmp) if f.startswith(name + "-")]
        return [p for p in found if psutil.pid_exists(p)]

    return wait_until(pids, 30, 0.01, f"task {name} to start")[-1]


def test_a_worker_nodes_monitor_kills_the_newest_and_the_owner_retries_or_fails(
    cluster, tmp_path, monkeypatch
):
    monkeypatch.setattr(config, "task_oom_retry_delay_base_ms", 200)
    usage = tmp_path / "usage"
    usage.write_text("0.1")
    env = {"EMBER_MEMORY_MONITOR_USAGE_FILE": str(usage), "EMBER_MEMORY_USAGE_THRESHOLD": "0.9"}
    worker = cluster.add_node(num_cpus=3, env=env)
    cluster.connect()
    there = NodeAffinitySchedulingStrategy(worker.node_id.hex(), soft=False)
    gate, tmp = str(tmp_path / "gate"), str(tmp_path)

    def kills() -> int:
        return cluster.raylet_call(worker, "node_stats", {})["memory_monitor"]["kills_total"]

    def kill_then_lower(pid: int) -> None:
        # Low again as soon as one kill is made: the monitor judges again only a refresh
        # (250 ms) after its victim's exit is seen.
        before = kills()
        usage.write_text("0.99")
        wait_until(lambda: kills() > before, 15, 0.005, "a kill")
        usage.write_text("0.1")
        wait_until(lambda: process_gone(pid), 15, 0.01, f"the end of {pid}")

    older = hold.options(name="older", scheduling_strategy=there).remote("older", gate, tmp)
    older_pid = _started(tmp, "older")
    newer = hold.options(name="newer", scheduling_strategy=there).remote("newer", gate, tmp)
    newer_pid = _started(tmp, "newer")
    kill_then_lower(newer_pid)
    retried = wait_until(lambda: (p := _started(tmp, "newer")) != newer_pid and p, 30, 0.05)
    open(gate, "w").close()
    assert ember.get([older, newer], timeout=30) == [("older", older_pid), ("newer", retried)]

    os.unlink(gate)

    # The finished tasks' workers may stay leased to the driver for a while (it reuses
    # leases), and the monitor kills a leased retriable worker first: wait for their return,
    # so the hog is the only worker on its way to be chosen.
    def leased() -> int:
        rows = cluster.raylet_call(worker, "list_workers")
        return sum(w.get("state") == "LEASED" for w in rows)

    wait_until(lambda: leased() == 0, 60, 0.2, "the finished tasks' leases to be returned")
    hog = hold.options(name="hog", max_retries=0, scheduling_strategy=there)
    ref = hog.remote("hog", gate, tmp)
    kill_then_lower(_started(tmp, "hog"))
    with pytest.raises(OutOfMemoryError) as e:
        ember.get(ref, timeout=30)
    assert "hog()" in str(e.value) and worker.node_id.hex() in str(e.value)
    stats = cluster.raylet_call(worker, "node_stats", {})["memory_monitor"]
    assert stats["kills_total"] == 2
    assert [k["task"].split(" (")[0] for k in stats["kills"]] == ["task newer", "task hog"]
    assert [k["retry"] for k in stats["kills"]] == [True, False]
    open(gate, "w").close()
