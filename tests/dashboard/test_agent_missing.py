"""An agent that disconnects (issue 4 §6): ``/api/objects`` and ``/api/stack`` name the nodes
they could not reach in ``missing`` and do not serve a lost node's old rows as current.

The dashboard side is the real one (``AgentHub``'s gRPC server, the app's routes); the agents
are fake ones speaking the real wire protocol over gRPC, so a disconnect is a real end of the
stream, as when an agent dies.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc
import httpx
from ember.agent import wire
from ember.dashboard.agent_hub import AgentHub
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.state import DashboardState

A, B = "a1" * 16, "b2" * 16


class FakeAgent:
    """Connects like ``Agent._stream``: hello, one metrics message, then answers requests."""

    def __init__(self, address: str, node_id: str, pid: int) -> None:
        self.address, self.node_id, self.pid = address, node_id, pid
        self.channel: grpc.aio.Channel | None = None
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        self.channel = grpc.aio.insecure_channel(self.address, options=wire.CHANNEL_OPTIONS)
        call = self.channel.stream_stream(wire.METHOD)()
        await call.write(wire.encode({"type": "hello", "node_id": self.node_id, "info": {}}))
        worker = {"pid": self.pid, "worker_id": "w" + self.node_id[:4], "kind": "worker"}
        await call.write(
            wire.encode(
                {"type": "metrics", "time": 1.0, "sample": {}, "workers": [worker], "logs": []}
            )
        )
        self.task = asyncio.ensure_future(self._serve(call))

    async def _serve(self, call: Any) -> None:
        async for raw in call:
            msg = wire.decode(raw)
            body: dict[str, Any]
            if msg["op"] == "objects":
                row = {"node_id": self.node_id, "object_id": "ob" + self.node_id[:6], "pid": 1}
                body = {"rows": [row], "unanswered": 0, "store": {"used": 1}}
            else:  # stack
                proc = {"pid": self.pid, "threads": [{"name": "MainThread"}], "error": None}
                body = {"error": None, "processes": [proc]}
            await call.write(wire.encode({"type": "reply", "rid": msg["rid"], "body": body}))

    async def disconnect(self) -> None:
        assert self.task is not None and self.channel is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.channel.close()


async def _until(predicate, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {predicate}"
        await asyncio.sleep(0.02)


async def _scenario() -> None:
    state = DashboardState()
    hub = AgentHub(state)
    address = await hub.start()
    app = create_app(DashboardContext(state=state, hub=hub)).fastapi
    agents = [FakeAgent(address, A, 101), FakeAgent(address, B, 202)]
    try:
        for agent in agents:
            await agent.start()
        await _until(lambda: set(hub.connected_nodes()) == {A, B} and len(state.workers) == 2)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as http:
            out = (await http.get("/api/objects", params={"max_age": 0})).json()
            assert out["missing"] == {} and {r["node_id"] for r in out["items"]} == {A, B}
            stacks = (await http.get("/api/stack")).json()
            assert {n["node_id"] for n in stacks["nodes"]} == {A, B} and stacks["missing"] == {}

            await agents[1].disconnect()
            await _until(lambda: hub.connected_nodes() == [A])

            # max_age large: B's rows are fresh by age, but its agent is gone, so they go.
            out = (await http.get("/api/objects", params={"max_age": 3600})).json()
            assert set(out["missing"]) == {B}
            assert "disconnected" in out["missing"][B] and B[:12] in out["missing"][B]
            assert {r["node_id"] for r in out["items"]} == {A} and out["total"] == 1
            assert set(out["store"]) == {A} and set(out["summary"]["by_node"]) == {A}

            stacks = (await http.get("/api/stack")).json()
            assert [n["node_id"] for n in stacks["nodes"]] == [A]
            assert set(stacks["missing"]) == {B} and "disconnected" in stacks["missing"][B]
            # One process of the lost node, asked for by name: a 503 saying which agent.
            r = await http.get("/api/stack", params={"pid": 202})
            assert r.status_code == 503 and B[:12] in r.json()["detail"]

            # A node alive in the GCS whose agent never connected is missing too.
            C = "c3" * 16
            state.cluster = {"nodes": [{"node_id": C, "state": "ALIVE"}]}
            out = (await http.get("/api/objects")).json()
            assert "never connected" in out["missing"][C]
            assert C in (await http.get("/api/stack")).json()["missing"]
    finally:
        for agent in agents:
            if agent.task is not None and not agent.task.done():
                await agent.disconnect()
        await hub.stop()


def test_objects_and_stack_name_a_disconnected_agent():
    asyncio.run(asyncio.wait_for(_scenario(), 60))
