"""Membership and failure (issue 3 §5): a node killed or gone silent mid-workload, actors
restarting elsewhere, lost objects, a node that returns, and the head going away."""

from __future__ import annotations

import os
import signal
import time

import ember
import numpy as np
import pytest
from ember import config
from ember.exceptions import ObjectLostError, WorkerCrashedError
from ember_test_utils import wait_until


@ember.remote
def slow(i: int, delay: float) -> tuple[int, str]:
    time.sleep(delay)
    return i, ember.get_runtime_context().get_node_id()


@ember.remote
def marked(i: int, marker_dir: str, delay: float) -> tuple[int, str]:
    """Leaves a file saying it is running, then works."""
    open(os.path.join(marker_dir, f"{i}-{os.getpid()}"), "w").close()
    time.sleep(delay)
    return i, ember.get_runtime_context().get_node_id()


def test_kill_a_worker_node_mid_workload(cluster, tmp_path):
    victim = cluster.add_node(num_cpus=2, resources={"pool": 2})
    survivor = cluster.add_node(num_cpus=2, resources={"pool": 2})
    cluster.connect()
    on_victim = NodeAffinity(victim.node_id.hex())
    marks = str(tmp_path)
    # Two tasks that cannot be retried run on the victim; eight that can, anywhere.
    once = [
        marked.options(scheduling_strategy=on_victim, max_retries=0).remote(100 + i, marks, 30)
        for i in range(2)
    ]
    retried = [
        marked.options(resources={"pool": 1}, max_retries=3).remote(i, marks, 1.0) for i in range(8)
    ]
    wait_until(lambda: sum(f.startswith("10") for f in os.listdir(marks)) == 2, timeout=30)
    cluster.remove_node(victim, allow_graceful=False)
    results = ember.get(retried, timeout=60)
    assert [r[0] for r in results] == list(range(8))
    for ref in once:
        with pytest.raises(WorkerCrashedError):
            ember.get(ref, timeout=30)
    # ember status lists it under recent failures, with what it had.
    from ember.cli.status import render, summarize

    text = render(summarize(cluster.gcs_call("cluster_info")))
    failures = text.split("Recent failures:")[1].split("Resources")[0]
    assert f"node_{victim.node_id.hex()}" in failures and "2.0 CPU" in failures
    # Work submitted after the death runs on the survivor.
    later = ember.get(marked.options(resources={"pool": 1}).remote(50, marks, 0), timeout=30)
    assert later[1] == survivor.node_id.hex()
    # The dashboard says why the node is dead as the GCS does: its raylet went, not "its
    # agent disconnected" (an agent can go and come back on a live node).
    import httpx

    with httpx.Client(base_url=cluster.head_node.dashboard_url, timeout=30) as http:
        node = wait_until(
            lambda: (
                (n := http.get(f"/api/nodes/{victim.node_id.hex()}").json())["state"] == "DEAD"
                and n
            ),
            timeout=30,
            message="the dashboard to mark the node dead",
        )
        assert node["lost_reason"] == "the GCS declared it dead: its raylet disconnected", node
        lost = http.get("/api/events", params={"filter": "kind=NODE_LOST"}).json()["items"]
        assert [e["message"] for e in lost if e["node_id"] == victim.node_id.hex()] == [
            f"node {victim.node_id.hex()[:12]}: the GCS declared it dead: its raylet disconnected"
        ]


def test_actor_restarts_on_another_node(cluster):
    first = cluster.add_node(num_cpus=1, resources={"slot": 1})
    cluster.connect()

    @ember.remote(resources={"slot": 1}, max_restarts=1, max_task_retries=2)
    class Counter:
        def where(self) -> str:
            return ember.get_runtime_context().get_node_id()

    actor = Counter.remote()
    assert ember.get(actor.where.remote(), timeout=30) == first.node_id.hex()
    second = cluster.add_node(num_cpus=1, resources={"slot": 1})
    cluster.remove_node(first, allow_graceful=False)
    assert ember.get(actor.where.remote(), timeout=30) == second.node_id.hex()


def test_lost_objects_error_or_are_rebuilt_from_lineage(cluster):
    node = cluster.add_node(num_cpus=1, resources={"maker": 1})
    cluster.add_node(num_cpus=1, resources={"maker": 1})
    cluster.connect()

    @ember.remote(resources={"maker": 1})
    def make(tag: int) -> np.ndarray:
        return np.full(1024 * 1024, tag, dtype=np.uint8)

    @ember.remote
    def first_byte(array: np.ndarray) -> int:
        return int(array[0])

    node_hex = node.node_id.hex()
    pin = NodeAffinity(node_hex, soft=True)  # there first; anywhere once it is gone
    lost = make.options(max_retries=0, scheduling_strategy=pin).remote(1)
    rebuilt = make.options(max_retries=2, scheduling_strategy=pin).remote(2)
    passed = make.options(max_retries=2, scheduling_strategy=pin).remote(3)
    # fetch_local=False: made, but not copied to the head (a copy there would survive).
    ember.wait([lost, rebuilt, passed], num_returns=3, timeout=30, fetch_local=False)
    # Read once where it lives (Ray's test_plasma_reconstruction): no copy elsewhere.
    assert ember.get(first_byte.options(scheduling_strategy=pin).remote(passed), timeout=30) == 3
    cluster.remove_node(node, allow_graceful=False)
    wait_until(lambda: node.node_id not in cluster.alive_node_ids(), timeout=20)
    with pytest.raises(ObjectLostError):
        ember.get(lost, timeout=30)
    assert int(ember.get(rebuilt, timeout=30)[0]) == 2  # re-run on the surviving node
    # Passed to a task, a borrower asks its owner, which rebuilds it first.
    assert ember.get(first_byte.remote(passed), timeout=30) == 3


def test_a_get_with_a_timeout_ends_there_while_a_lost_object_is_rebuilt(cluster, tmp_path):
    """A get's timeout holds while the object it waits for is being rebuilt (its re-run
    blocks here until released): GetTimeoutError at the timeout, and a later get has it."""
    node = cluster.add_node(num_cpus=1, resources={"maker": 1})
    cluster.add_node(num_cpus=1, resources={"maker": 1})
    cluster.connect()
    ran, release = tmp_path / "ran", tmp_path / "release"

    @ember.remote(resources={"maker": 1}, max_retries=2)
    def make() -> np.ndarray:
        if ran.exists():  # the re-run: waits to be released
            deadline = time.monotonic() + 60
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        ran.touch()
        return np.full(1024 * 1024, 7, dtype=np.uint8)

    pinned = make.options(scheduling_strategy=NodeAffinity(node.node_id.hex(), soft=True))
    ref = pinned.remote()
    ember.wait([ref], timeout=30, fetch_local=False)
    cluster.remove_node(node, allow_graceful=False)
    wait_until(lambda: node.node_id not in cluster.alive_node_ids(), timeout=20)
    started = time.monotonic()
    with pytest.raises(ember.exceptions.GetTimeoutError):
        ember.get(ref, timeout=2)
    assert time.monotonic() - started < 10
    release.touch()
    assert int(ember.get(ref, timeout=60)[0]) == 7


def NodeAffinity(node_hex: str, soft: bool = False):
    from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_hex, soft=soft)


def _node_of_pid(pid: int, nodes) -> object | None:
    """The node whose raylet ``pid`` descends from (its workers are forked by its zygote)."""
    import psutil

    try:
        parents = {p.pid for p in psutil.Process(pid).parents()}
    except psutil.Error:
        return None
    return next((n for n in nodes if n.procs["raylet"].pid in parents), None)


def _running(marks: str, wanted: int) -> list[tuple[int, int]]:
    """The (task, pid) marker files once ``wanted`` tasks have started (else empty)."""
    found = [tuple(map(int, f.split("-"))) for f in os.listdir(marks)]
    return found if len(found) >= wanted else []


def test_silent_node_is_declared_dead_and_rejoins_as_new(cluster, tmp_path):
    quiet = cluster.add_node(num_cpus=1, resources={"pool": 1})
    other = cluster.add_node(num_cpus=1, resources={"pool": 1})
    cluster.connect()
    marks = str(tmp_path)
    first = [
        marked.options(resources={"pool": 1}, max_retries=2).remote(i, marks, 3.0) for i in range(2)
    ]
    # Both tasks are running, one on each node (each node has one "pool").
    started = wait_until(lambda: _running(marks, 2), timeout=30, message="both tasks running")
    on_quiet = [i for i, pid in started if _node_of_pid(pid, [quiet, other]) is quiet]
    assert len(on_quiet) == 1, started
    pgid = quiet.procs["raylet"].pid
    os.killpg(pgid, signal.SIGSTOP)  # the node and its workers freeze: sockets stay open
    try:
        wait_until(lambda: quiet.node_id not in cluster.alive_node_ids(), timeout=20)
        # Its task is retried on the other node.
        results = dict(ember.get(first, timeout=30))
        assert sorted(results) == [0, 1]
        assert results[on_quiet[0]] == other.node_id.hex()
        # Started twice: once on the frozen node, then again (the retry).
        assert sum(1 for i, _ in _running(marks, 0) if i == on_quiet[0]) == 2
    finally:
        os.killpg(pgid, signal.SIGCONT)

    def rejoined() -> bool:
        now = cluster.alive_node_ids()
        return len(now) == 3 and quiet.node_id not in now

    wait_until(rejoined, timeout=20, message="the silent node to rejoin under a new id")
    # It takes work again under its new id.
    refs = [slow.options(resources={"pool": 1}).remote(i, 0.5) for i in range(4)]
    assert len(ember.get(refs, timeout=30)) == 4


def test_head_loss_gives_a_clear_error_within_seconds(cluster, tmp_path, monkeypatch):
    # The driver (this process) tries to reconnect as long as the nodes do.
    monkeypatch.setattr(config, "gcs_reconnect_timeout", 4.0)
    worker = cluster.add_node(num_cpus=1)
    cluster.connect(node=worker)  # the driver lives on the worker node
    marks = str(tmp_path)
    ref = marked.remote(0, marks, 60.0)
    wait_until(lambda: _running(marks, 1), timeout=30, message="the task running")
    start = time.monotonic()
    cluster.remove_node(cluster.head_node, allow_graceful=False)
    with pytest.raises(ObjectLostError, match="head node is gone"):
        ember.get(ref, timeout=30)
    assert time.monotonic() - start < 10


def test_worker_node_shuts_down_and_says_why_when_the_head_goes(cluster):
    worker = cluster.add_node(num_cpus=1)
    import psutil

    raylet = psutil.Process(worker.procs["raylet"].pid)
    procs = [psutil.Process(p.pid) for p in worker.procs.values()]
    procs += raylet.children(recursive=True)  # its zygote and workers
    assert len(procs) >= 3
    cluster.remove_node(cluster.head_node, allow_graceful=False)
    # Every process of the worker node exits on its own (the test stops nothing of it).
    gone, alive = psutil.wait_procs(procs, timeout=20)
    assert not alive, [(p.pid, p.name()) for p in alive]
    log = os.path.join(worker.session_dir, "logs", "raylet.log")
    with open(log, errors="replace") as f:
        text = f.read()
    assert "lost the GCS" in text and "the node shuts down" in text, text[-2000:]


def test_a_killed_agent_is_restarted_and_tasks_keep_running(cluster):
    """A worker node's agent is its own process, which its raylet restarts; the node stays
    ALIVE with its start time, tasks on it never notice, and the dashboard says the agent
    went away. (The head's agent runs in the dashboard's process: test_agent_supervisor.)"""
    import httpx
    import psutil

    node = cluster.add_node(num_cpus=1, resources={"far": 1})
    cluster.connect()
    http = httpx.Client(base_url=cluster.head_node.dashboard_url, timeout=30)
    node_id = node.node_id.hex()

    def rows(kind: str) -> list[dict]:
        r = http.get("/api/workers", params={"filter": [f"kind={kind}", f"node_id={node_id}"]})
        assert r.status_code == 200, r.text
        return r.json()["items"]

    agent = wait_until(lambda: rows("agent"), timeout=30, message="the node's agent")[0]
    raylet = wait_until(lambda: rows("raylet"), timeout=30, message="the node's raylet")[0]
    # The node's start is its raylet's, so an agent's restart does not make it look young.
    started = http.get(f"/api/nodes/{node_id}").json()["start_time"]
    assert abs(started - psutil.Process(raylet["pid"]).create_time()) < 0.5
    psutil.Process(agent["pid"]).kill()
    on_node = slow.options(resources={"far": 1})
    assert ember.get(on_node.remote(1, 0), timeout=30) == (1, node_id)
    wait_until(
        lambda: any(w["pid"] != agent["pid"] for w in rows("agent")),
        timeout=30,
        message="a new agent",
    )
    after = http.get(f"/api/nodes/{node_id}").json()
    assert after["state"] == "ALIVE" and after["start_time"] == started
    # An agent's restart is said as such; the node was never lost.
    events = http.get("/api/events", params={"filter": f"node_id={node_id}"}).json()["items"]
    kinds = [e["kind"] for e in events]
    assert "AGENT_DISCONNECTED" in kinds and "NODE_LOST" not in kinds, events
    http.close()
