"""SIGKILL of a cluster's processes while a driver's workload runs: a task's worker, an actor
with restarts and one without, the worker node's raylet, its agent, and the dashboard.

Each case starts the load driver, kills its target once the load is under way, and counts as
survived when the load goes on (two more rounds, all correct), ends cleanly, what should come
back has come back, and the probe (run by the caller) passes.
"""

from __future__ import annotations

import os
import signal
import urllib.request
from collections.abc import Callable

import psutil
from ember.tools.chaos.harness import FaultError, Harness, Injected, poll

LOAD_TIMEOUT = 120.0  # a round of the load, after a fault, on a busy 2-core machine


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        raise FaultError(f"the target {pid} was gone before the kill") from None


def _children_running(parent_pid: int, module: str) -> list[int]:
    try:
        kids = psutil.Process(parent_pid).children()
    except psutil.Error:
        return []
    found = []
    for p in kids:
        try:
            if module in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def kill_worker(h: Harness, ready: dict[str, str]) -> str:
    """A task's worker on the worker node (leased, not an actor's)."""

    def leased() -> int | None:
        rows = h.cluster.raylet_call(h.far, "list_workers")
        ours = [r for r in rows if not r.get("is_driver") and not r.get("actor_id") and r["pid"]]
        busy = [r for r in ours if r.get("job_id")]
        pick = (busy or ours)[:1]
        return pick[0]["pid"] if pick else None

    pid = poll(leased, 30, "task worker on the worker node")
    _kill(pid)
    return f"worker {pid}"


def kill_actor(h: Harness, ready: dict[str, str]) -> str:
    pid = int(ready["actor_pid"])
    _kill(pid)
    return f"actor (max_restarts=-1) {pid}"


def kill_fragile_actor(h: Harness, ready: dict[str, str]) -> str:
    pid = int(ready["fragile_pid"])
    _kill(pid)
    return f"actor (max_restarts=0) {pid}"


def kill_raylet(h: Harness, ready: dict[str, str]) -> str:
    node = h.far
    pid = node.procs["raylet"].pid
    _kill(pid)
    # The GCS must declare the node dead (its heartbeats stop) for its work to move.
    poll(lambda: node.node_id not in h.cluster.alive_node_ids(), 30, "node death in the GCS")
    return f"raylet {pid} of the worker node"


def kill_agent(h: Harness, ready: dict[str, str]) -> str:
    raylet = h.far.procs["raylet"].pid
    pid = poll(lambda: _children_running(raylet, "ember.agent"), 30, "agent of the worker node")[0]
    _kill(pid)
    # Its raylet starts another (child_supervisor).
    poll(
        lambda: [p for p in _children_running(raylet, "ember.agent") if p != pid],
        60,
        "new agent started by the raylet",
    )
    return f"agent {pid} of the worker node"


def _dashboard_pids(h: Harness) -> list[int]:
    found = []
    for p, tag in h.marked():
        try:
            if tag == "head" and "ember.dashboard.server" in " ".join(p.cmdline()):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def _dashboard_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/api/version", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def kill_dashboard(h: Harness, ready: dict[str, str]) -> str:
    url = h.head.dashboard_url
    if not url:
        raise FaultError("the head has no dashboard")
    pid = poll(lambda: _dashboard_pids(h), 30, "dashboard process")[0]
    _kill(pid)
    # The head's raylet starts a new dashboard on the same port (dashboard_supervisor).
    poll(lambda: [p for p in _dashboard_pids(h) if p != pid], 60, "new dashboard process")
    poll(lambda: _dashboard_answers(url), 60, f"answer from the new dashboard at {url}")
    return f"dashboard {pid}"


Inject = Callable[[Harness, dict[str, str]], str]


def under_load(h: Harness, inject: Inject, fragile: bool = False) -> str:
    """Runs the load, injects the fault once it is under way, and checks the load keeps
    going and ends correctly. Returns what was killed."""
    load = h.driver("load", "fragile" if fragile else "")
    try:
        ready = dict(w.split("=", 1) for w in load.expect("READY", LOAD_TIMEOUT))
        load.expect("ITER", LOAD_TIMEOUT)
        what = inject(h, ready)
        for _ in range(2):  # two full rounds after the fault: the cluster kept serving
            load.expect("ITER", LOAD_TIMEOUT)
        load.tell("stop")
        if fragile:
            load.expect("FRAGILE_DIED", LOAD_TIMEOUT)
        load.expect("DONE", LOAD_TIMEOUT)
        code = load.wait(60)
        if code != 0:
            raise FaultError(f"the load exited with {code}: {load.tail()}")
        return what
    finally:
        load.kill()


KILLS: list[tuple[str, Inject, bool]] = [
    ("SIGKILL task worker", kill_worker, False),
    ("SIGKILL actor (restartable)", kill_actor, False),
    ("SIGKILL actor (no restarts)", kill_fragile_actor, True),
    ("SIGKILL worker node's agent", kill_agent, False),
    ("SIGKILL dashboard", kill_dashboard, False),
    ("SIGKILL worker node's raylet", kill_raylet, False),
]


def run_kill(h: Harness, inject: Inject, fragile: bool) -> Injected:
    try:
        what = under_load(h, inject, fragile)
    finally:
        if h.far.procs["raylet"].poll() is not None:
            # A fresh worker node, so the probe (and the next fault) has two nodes again.
            h.replace_far()
    return Injected(what)
