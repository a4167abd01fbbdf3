"""The raylet's supervision of the agent (``core/raylet/child_supervisor.py``): an agent that
keeps dying is restarted at most ``MAX_RESTARTS`` times a minute, then left down; ``stop``
ends a running one. The head's agent, in the dashboard's process, is restarted by
``keep_running``. The live restart after a SIGKILL is in tests/cluster/test_cluster_failures.py."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

from ember.raylet import child_supervisor
from ember.raylet.child_supervisor import AgentSupervisor
from ember_test_utils import fake_spawn


def _supervisor(tmp_path, monkeypatch, code: str) -> tuple[AgentSupervisor, list]:
    os.makedirs(tmp_path / "logs", exist_ok=True)
    sup = AgentSupervisor(["--components", "gcs_server=1"], str(tmp_path))
    spawned = fake_spawn(monkeypatch, sup, code)
    monkeypatch.setattr(child_supervisor, "POLL", 0.05)
    return sup, spawned


def test_the_raylet_adds_itself_to_the_components():
    sup = AgentSupervisor(["--components", "gcs_server=1"], "/nowhere")
    assert sup.argv == ["--components", f"gcs_server=1,raylet={os.getpid()}"]
    assert AgentSupervisor([], "/nowhere").argv == ["--components", f"raylet={os.getpid()}"]


def test_an_agent_that_keeps_dying_is_restarted_five_times_then_left_down(tmp_path, monkeypatch):
    sup, spawned = _supervisor(tmp_path, monkeypatch, "raise SystemExit(3)")

    async def run() -> None:
        sup.proc = sup._spawn()
        await asyncio.wait_for(sup._watch_loop(), 60)  # returns when it gives up

    asyncio.run(run())
    assert len(spawned) == 1 + child_supervisor.MAX_RESTARTS
    assert sup.proc is None and all(p.wait(5) == 3 for p in spawned)


def test_stop_ends_a_running_agent_and_it_is_not_restarted(tmp_path, monkeypatch):
    sup, spawned = _supervisor(tmp_path, monkeypatch, "import time; time.sleep(60)")

    async def run() -> None:
        sup.proc = sup._spawn()
        sup._watch = asyncio.ensure_future(sup._watch_loop())
        await asyncio.sleep(0.2)
        await sup.stop()
        await asyncio.sleep(0.2)

    asyncio.run(run())
    assert len(spawned) == 1 and spawned[0].wait(5) == -signal.SIGTERM


def test_an_agent_stopped_while_starting_exits_within_its_deadline(tmp_path):
    """Its raylet gone before it connected (the raylet no longer waits for it to start): the
    SIGTERM its parent's death sends ends it within STOP_DEADLINE_S, leaving no orphan."""
    import time

    from ember.agent.agent import STOP_DEADLINE_S

    (tmp_path / "logs").mkdir()
    (tmp_path / "sockets").mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ember.agent",
            "--node-id",
            "ab" * 16,
            "--session-dir",
            str(tmp_path),
            "--raylet-address",
            f"unix:{tmp_path}/sockets/no-raylet",  # nothing listens: it keeps retrying
        ]
    )
    try:
        sock = tmp_path / "sockets" / "agent"
        deadline = time.monotonic() + 30
        while not sock.exists():  # it serves its socket, then looks for the raylet
            assert proc.poll() is None and time.monotonic() < deadline, "the agent did not start"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(STOP_DEADLINE_S + 5) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_keep_running_restarts_a_failing_agent_then_gives_up_past_its_budget(monkeypatch):
    from ember.raylet.child_supervisor import keep_running

    monkeypatch.setattr(child_supervisor, "MAX_RESTARTS", 2)
    runs: list[int] = []
    deaths: list[tuple[str, bool]] = []

    async def run_once() -> None:
        runs.append(1)
        raise RuntimeError(f"failure {len(runs)}")

    async def main() -> None:
        stop = asyncio.Event()
        record = lambda e, restarting: deaths.append((str(e), restarting))  # noqa: E731
        await asyncio.wait_for(keep_running(run_once, stop, record), 30)

    asyncio.run(main())
    assert deaths == [("failure 1", True), ("failure 2", True), ("failure 3", False)]


def test_keep_running_returns_when_stopped_without_a_restart():
    from ember.raylet.child_supervisor import keep_running

    runs: list[int] = []

    async def main() -> None:
        stop = asyncio.Event()

        async def run_once() -> None:
            runs.append(1)
            await stop.wait()

        asyncio.get_running_loop().call_later(0.2, stop.set)
        await asyncio.wait_for(keep_running(run_once, stop, lambda e, r: runs.append(99)), 10)

    asyncio.run(main())
    assert runs == [1]


def test_the_heads_agent_in_the_dashboards_process_restarts_and_says_so(tmp_path, monkeypatch):
    """The real agent on the dashboard's loop, streaming into a real hub: a failure of the
    agent is an AGENT_FAILED event (no process exit shows it), a new agent takes over and the
    node's metrics keep arriving. The agent runs without a raylet here, as it does when it
    cannot reach one; its first stream fails by injection."""
    import json
    import time

    from ember.agent.agent import Agent
    from ember.dashboard import server
    from ember.dashboard.agent_hub import AgentHub
    from ember.dashboard.state import DashboardState
    from ember.launch import node_agent_argv

    for sub in ("logs", "sockets"):
        (tmp_path / sub).mkdir()

    async def without_raylet(self, stop) -> None:
        return None

    streams: list[Agent] = []
    real_loop = Agent.dashboard_loop

    async def first_one_fails(self) -> None:
        streams.append(self)
        if len(streams) == 1:
            raise RuntimeError("injected failure")
        await real_loop(self)

    monkeypatch.setattr(Agent, "_connect_raylet", without_raylet)
    monkeypatch.setattr(Agent, "dashboard_loop", first_one_fails)
    node_id = "ab" * 16
    argv = node_agent_argv(
        node_id=node_id,
        session_dir=str(tmp_path),
        raylet_address="unix:" + str(tmp_path / "sockets" / "raylet"),
        head=True,
    )

    async def main() -> DashboardState:
        state = DashboardState()
        hub = AgentHub(state)
        stop = asyncio.Event()
        task = asyncio.ensure_future(server._run_node_agent(json.dumps(argv), hub, stop))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            node = state.nodes.get(node_id)
            if node is not None and node.metrics.get("mem_total_bytes") and node_id in hub.links:
                break
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(task, 10)
        assert node_id not in hub.links  # the stopped agent closed its link
        return state

    state = asyncio.run(main())
    assert len(streams) == 2
    assert state.nodes[node_id].metrics["mem_total_bytes"] > 0
    failed = [e for e in state.events if e.get("kind") == "AGENT_FAILED"]
    assert len(failed) == 1 and "injected failure" in failed[0]["message"]
    assert "restarting it" in failed[0]["message"]
    workers = (state.workers.get(node_id) or {}).values()
    assert any(w["kind"] == "dashboard" and w["pid"] == os.getpid() for w in workers)


def test_in_process_messages_are_what_the_wire_would_deliver():
    """The head's agent skips the JSON round trip for task events: the hub must still get
    exactly what a remote agent's stream would decode to."""
    import math

    from ember.agent import wire
    from ember.agent.link import as_received

    plain = [
        ["aa" * 24, "PENDING_ARGS_AVAIL", 1.5, 0, {"name": "m.f", "actor_id": None}],
        ("bb" * 24, "SUBMITTED_TO_WORKER", 2.5, 1, {"worker_id": b"\x01\x02"}),
        ["cc" * 24, "FINISHED", 3.5, 0, {"pid": 7, "ok": True, "timings": {"start": 3.0}}],
        ["dd" * 24, "FAILED", math.inf, 2, {"error": "Traceback..."}],
        ["ee" * 24, "RUNNING", 4.5, 0, None],
        # As a worker sends them: where its log ends as a tuple, timings nested.
        ("ab" * 24, "RUNNING", 4.6, 0, {"name": "A.f", "pid": 9, "log_at": (10, 20)}),
        ["ac" * 24, "FINISHED", 4.7, 0, {"timings": {"run": [4.6, 4.7]}, "ids": [b"\x04"]}],
    ]
    odd = plain + [["ff" * 24, "PROFILE", 5.0, 0, {"extra": {"k": (1, 2)}, "n": {3: "x"}}]]
    deep = plain + [["fe" * 24, "PROFILE", 5.1, 0, {"a": [[[[[{"b": object()}]]]]]}]]
    for events in (plain, odd, deep):
        msg = {"type": "task_events", "job_id": "01", "worker_id": "02", "events": events}
        assert as_received(msg) == wire.decode(wire.encode(msg))
    # The fast path took the plain batch (the round trip would not keep the same objects).
    from ember.agent import link

    calls = []
    real = link.wire.encode
    link.wire.encode = lambda m: calls.append(m) or real(m)
    try:
        as_received({"type": "task_events", "events": plain})
    finally:
        link.wire.encode = real
    assert calls == []
    other = {"type": "event", "severity": "ERROR", "detail": {"ids": {b"\x03"}}}
    assert as_received(other) == wire.decode(wire.encode(other))
