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


TIB = 1 << 40


@ember.remote(memory=2 * TIB)
def needs_2tib() -> int:
    return 1


@ember.remote(memory=2 * TIB, num_cpus=1)  # the task's shape: one line each, not merged
class Needs2Tib:
    pass


def test_pending_demands_show_memory_in_units(ember_start):
    # An infeasible task and an infeasible actor of the same shape: each is listed once, and
    # every amount of memory the user reads is in binary units, not a count of bytes.
    import json
    import os
    import subprocess
    import sys

    ctx = ember_start(num_cpus=1)
    url = ctx.dashboard_url.rstrip("/")
    task = needs_2tib.remote()
    actor = Needs2Tib.options(name="needs2tib").remote()
    from ember.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{"CPU": 1, "memory": 2 * 2**40}], strategy="PACK")
    reason = wait_until(lambda: _reason(url, "needs2tib"), 30, 0.2, "the actor's reason")
    assert reason.startswith("infeasible: no node has {CPU: 1, memory: 2.0 TiB} (nodes have: {")
    assert "e+" not in reason and " GiB" in reason  # the node's own memory, in units too
    ember_cli = os.path.join(os.path.dirname(sys.executable), "ember")

    def status() -> str | None:
        out = subprocess.run(
            [ember_cli, "status", "--address", url], capture_output=True, text=True, timeout=60
        ).stdout
        wanted = ("pending tasks", "pending actor", "pending placement groups")
        return out if all(w in out for w in wanted) else None

    out = wait_until(status, 30, 0.5, "both demands in ember status")
    demands = out.split("Pending Demands:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert demands[-1].startswith(" Pending tasks (exact, every owner's queue): "), out
    assert demands[:-1] == [
        " {CPU: 1, memory: 2.0 TiB}: 1+ pending tasks/actors (infeasible: no node has these "
        "resources)",
        " {CPU: 1, memory: 2.0 TiB}: 1+ pending actor Needs2Tib (infeasible: no node has these "
        "resources)",
        " {CPU: 1, memory: 2.0 TiB} (PACK): 1+ pending placement groups (infeasible: no node "
        "has these resources)",
    ], out
    assert "2199023255552" not in out
    listed = json.loads(httpx.get(f"{url}/api/cluster_status", timeout=10).text)
    assert [a["class_name"] for a in listed["pending_actors"]] == ["Needs2Tib"]
    ember.kill(actor)
    ember.cancel(task)
    remove_placement_group(group)
