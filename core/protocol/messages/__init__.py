"""The wire's catalogue: every op each kind of process handles, one message class per op.

Read it by receiver: ``gcs`` (the GCS), ``raylet`` (a node's raylet), ``worker`` (a core
worker, in drivers and workers alike), ``agent`` (a node's dashboard agent). Each class says
who sends it, its fields and types, and what comes back (``reply``, or ``oneway``). Frames,
errors and transports are in ``ember.protocol.codec``, ``errors`` and ``transports``.

The same op name can mean different things to different receivers (``create_actor`` to the
GCS asks it to place an actor; to a worker, it runs the constructor), so ops are unique per
catalogue, not across them.
"""

from __future__ import annotations

from ember.protocol.messages import agent, gcs, raylet, worker
from ember.protocol.messages.base import OMIT, Catalogue, Message

CATALOGUES: dict[str, Catalogue] = {
    c.service: c for c in (gcs.GCS, raylet.RAYLET, worker.WORKER, agent.AGENT)
}


def all_ops() -> set[str]:
    """Every op some process handles."""
    return set().union(*(c.ops() for c in CATALOGUES.values()))


__all__ = [
    "CATALOGUES",
    "OMIT",
    "Catalogue",
    "Message",
    "agent",
    "all_ops",
    "gcs",
    "raylet",
    "worker",
]
