"""An actor waiting for resources: its pending reason says what it asked for against what is
free now (and, when no node could ever hold it, against what exists), and it starts as soon as
a running task gives the resources back."""

from __future__ import annotations

import time

import ember
import httpx
from ember_test_utils import wait_until


@ember.remote
def hold_cpu(seconds: float) -> int:
    time.sleep(seconds)
    return 1


@ember.remote(num_cpus=2)
class TwoCpus:
    def ping(self) -> int:
        return 1


@ember.remote(num_cpus=8)
class TooBig:
    def ping(self) -> int:
        return 1


def _reason(url: str, name: str) -> str:
    items = httpx.get(f"{url}/api/actors?filter=name={name}", timeout=10).json()["items"]
    return (items[0].get("pending_reason") or "") if items else ""


def test_pending_reason_and_start_when_a_task_frees_the_cpu(ember_start):
    ctx = ember_start(num_cpus=2)
    url = ctx.dashboard_url.rstrip("/")
    busy = hold_cpu.remote(4.0)  # one of the two CPUs, for a few seconds
    # The GCS places actors by what the node last reported free: wait until that shows the
    # task's CPU as taken (the dashboard serves the GCS's view, empty before its first poll).
    status = f"{url}/api/cluster_status"

    def one_cpu_taken() -> bool:
        available = httpx.get(status, timeout=10).json()["resources"]["available"]
        return available.get("CPU", 2.0) <= 1

    wait_until(one_cpu_taken, message="the task's CPU in the dashboard's view")
    waiter = TwoCpus.options(name="two_cpus").remote()
    big = TooBig.options(name="too_big").remote()
    reason = wait_until(lambda: _reason(url, "two_cpus"), timeout=20, message="a reason")
    assert reason.startswith("waiting for resources {CPU: 2} to be free (free now: {CPU: 1} of ")
    assert "{CPU: 2} on node " in reason, reason
    big_reason = wait_until(lambda: _reason(url, "too_big"), timeout=20, message="a reason")
    assert big_reason.startswith("infeasible: no node has {CPU: 8} (nodes have: {"), big_reason
    assert "CPU: 2" in big_reason, big_reason
    # The task ends and returns its CPU: the waiting actor is placed without anything else
    # happening in the cluster (no node joining, no worker dying).
    assert ember.get(busy, timeout=30) == 1
    assert ember.get(waiter.ping.remote(), timeout=30) == 1
    del big
