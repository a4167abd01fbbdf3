"""Fakes for driving the GCS's parts without processes or sockets: connections that record
what the GCS sends and answer its calls, a clock to move by hand, a node, an actor spec."""

from __future__ import annotations

import asyncio
import inspect
import itertools
from typing import Any

from ember.core_worker.task_spec import ACTOR_CREATION_TASK, TaskSpec
from ember.gcs.server import GcsServer
from ember.gcs.storage import Store

_ids = itertools.count(1)


class FakeConn:
    """Records what the GCS sends; answers calls from ``replies`` ({op: value or fn(body)})."""

    def __init__(self, replies: dict | None = None) -> None:
        self.state: dict = {}
        self.closed = False
        self.sent: list[tuple[str, Any]] = []
        self.replies = replies or {}

    def send(self, op: str, body: Any = None) -> None:
        self.sent.append((op, body))

    async def call(self, op: str, body: Any = None, timeout: float | None = None) -> Any:
        reply = self.replies[op]
        return reply(body) if callable(reply) else reply

    def ops(self, op: str) -> list:
        return [b for o, b in self.sent if o == op]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def node_conn() -> FakeConn:
    """A raylet that grants every lease with a new worker and reserves every bundle."""

    def lease(body: dict) -> dict:
        n = next(_ids)
        return {"lease_id": n, "worker_id": n.to_bytes(28, "big"), "address": f"unix:/w{n}"}

    return FakeConn({"lease_actor_worker": lease, "reserve_bundles": True})


def make_gcs(store: Store | None = None) -> tuple[GcsServer, Clock, list[FakeConn]]:
    """A GCS over fakes; ``store``: where it writes its tables (None: nowhere)."""
    gcs = GcsServer("/nonexistent", node_death_timeout=10.0, store=store)
    clock = Clock()
    gcs.node_table.clock = clock
    workers: list[FakeConn] = []

    async def connect(address: str, handlers: dict, name: str = "", on_close: Any = None):
        w = FakeConn({"create_actor": {}})
        w.address = address
        workers.append(w)
        return w

    gcs.actors.connect = connect
    return gcs, clock, workers


def add_node(gcs: GcsServer, cpus: float = 2, **extra: float) -> tuple[bytes, FakeConn]:
    node_id = next(_ids).to_bytes(28, "big")
    conn = node_conn()
    gcs.on_connect(conn)
    body = {"node_id": node_id, "address": f"unix:/raylet{node_id[-1]}"}
    reply = gcs.handlers["register_node"](conn, body | {"resources": {"CPU": cpus, **extra}})
    if inspect.isawaitable(reply):  # a GCS with storage answers once the node is written
        asyncio.ensure_future(reply)
    return node_id, conn


def spec(job: bytes = b"job1", resources: dict | None = None, **options: Any) -> TaskSpec:
    n = next(_ids)
    options.setdefault("class_name", "A")
    return TaskSpec(
        task_id=n.to_bytes(24, "big"),
        kind=ACTOR_CREATION_TASK,
        actor_id=n.to_bytes(16, "big"),
        job_id=job,
        owner=(b"w" * 28, "unix:/owner", b""),
        resources={"CPU": 1.0} if resources is None else resources,
        actor_options=options,
    )


async def settle() -> None:
    """Lets the GCS's placement coroutines run to completion against the fakes."""
    for _ in range(20):
        await asyncio.sleep(0)


def run(test: Any) -> None:
    asyncio.run(test())
