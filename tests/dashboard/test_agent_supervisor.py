"""The raylet's supervision of the agent (``dashboard/agent_supervisor.py``): an agent that
keeps dying is restarted at most ``MAX_RESTARTS`` times a minute, then left down; ``stop``
ends a running one. The live restart after a SIGKILL is in test_live.py."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

from ember.dashboard import agent_supervisor
from ember.dashboard.agent_supervisor import AgentSupervisor


def _supervisor(tmp_path, monkeypatch, code: str) -> tuple[AgentSupervisor, list]:
    os.makedirs(tmp_path / "logs", exist_ok=True)
    sup = AgentSupervisor(["--components", "gcs_server=1"], str(tmp_path))
    spawned: list[subprocess.Popen] = []

    def spawn(ready_fd: int = -1) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", code])
        spawned.append(proc)
        return proc

    monkeypatch.setattr(sup, "_spawn", spawn)
    monkeypatch.setattr(agent_supervisor, "POLL", 0.05)
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
    assert len(spawned) == 1 + agent_supervisor.MAX_RESTARTS
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

    from ember.dashboard.agent import STOP_DEADLINE_S

    (tmp_path / "logs").mkdir()
    (tmp_path / "sockets").mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ember.dashboard.agent",
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
