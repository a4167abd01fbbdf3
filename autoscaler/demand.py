"""The scheduler's inputs read from the GCS's ``cluster_info`` reply, the same figures
``ember status`` prints: each alive node's totals, what is free, its queued lease shapes
(``pending_demands``, sent by its raylet with each heartbeat), the actors waiting for a node,
and the placement groups waiting for room.

A node's type is its ``ember.io/node-type`` label, set by the provider that started it. A
node without it was started by hand: it counts as capacity but is never idle to the
autoscaler, so it is never terminated. The head is the config's ``head_node_type``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ember.autoscaler.scheduler import Demand, NodeView, PlacementGroupDemand, Shape
from ember.resources import waiting_bundles

NODE_TYPE_LABEL = "ember.io/node-type"
UNMANAGED = ""  # the node type of a node the autoscaler did not start


# A placement group's own resources on the nodes holding its bundles (CPU_group_<id>,
# CPU_group_0_<id>, bundle_group_<id>...): work queued inside a group asks for these, and it is
# the group's bundles, already demand of their own, that make room for it.
_GROUP_RESOURCE = re.compile(r"_group_(\d+_)?[0-9a-f]{32}$")


def shape_of(raw: Mapping[str, Any] | None) -> dict[str, float]:
    return {k: float(v) for k, v in (raw or {}).items() if v}


def in_group(shape: Mapping[str, float]) -> bool:
    return any(_GROUP_RESOURCE.search(k) for k in shape)


@dataclass(frozen=True)
class Waiting:
    """What waits for room, by kind: queued lease shapes and pending actors' shapes (one per
    waiting request; work inside a placement group left out, its group's bundles being the
    demand) and each pending or rescheduling group as (id hex, strategy, unplaced bundles)."""

    leases: list[dict[str, float]]
    actors: list[dict[str, float]]
    groups: list[tuple[str, str, list[dict[str, float]]]]


def waiting(info: Mapping[str, Any]) -> Waiting:
    """The waiting work in the GCS's ``cluster_info`` reply (see ``Waiting``)."""
    leases: list[dict[str, float]] = []
    for node in info.get("nodes") or ():
        if node.get("state") != "ALIVE":
            continue
        for d in node.get("pending_demands") or ():
            leases += [shape_of(d["shape"])] * int(d.get("count", 1))
    actors = [shape_of(a.get("resources")) for a in info.get("pending_actors") or ()]
    groups = []
    for g in info.get("placement_groups") or ():
        bundles = waiting_bundles(g)
        if bundles:
            raw = g.get("placement_group_id") or b""
            group_id = raw.hex() if isinstance(raw, bytes) else str(raw)
            strategy = g.get("strategy") or "PACK"
            groups.append((group_id, strategy, [shape_of(b) for b in bundles]))
    return Waiting(
        [s for s in leases if s and not in_group(s)],
        [s for s in actors if s and not in_group(s)],
        groups,
    )


def demand_from_cluster_info(info: Mapping[str, Any], requested: Iterable[Shape] = ()) -> Demand:
    """The scheduler's demand: every waiting shape, each waiting group's unplaced bundles
    with its strategy, and the request_resources bundles."""
    w = waiting(info)
    return Demand(
        shapes=tuple(w.leases + w.actors),
        placement_groups=tuple(
            PlacementGroupDemand(tuple(bundles), strategy) for _, strategy, bundles in w.groups
        ),
        requested=tuple(shape_of(r) for r in requested),
    )


# Heartbeats after a join by which every queue report reflects it: the other nodes learn of
# the new node in a heartbeat's reply, spill to it, and report their queue in the next one.
SETTLED_AFTER_HEARTBEATS = 3


def reported_before_newest_change(info: Mapping[str, Any]) -> bool:
    """Whether a node's queue, as last reported, may predate work moving to another node.
    Each node reports on its own heartbeat: a request the head still lists may already hold
    resources on a node that just joined, or on one that just took it (spilled there), and
    counting it twice launches a node too many. Reports a few heartbeats after the other
    node's join, or after its report that showed resources taken, settle it. Only other
    nodes count: a node's own start (a cluster's head just up, its first burst queued) moved
    none of its requests anywhere."""
    alive = [n for n in info.get("nodes") or () if n.get("state") == "ALIVE"]
    settle = SETTLED_AFTER_HEARTBEATS * float(info.get("heartbeat_interval") or 0.5)
    for n in alive:
        if not n.get("pending_demands") or n.get("demands_at") is None:
            continue
        changes = [
            max(m.get("start_time") or 0.0, m.get("taken_at") or 0.0) for m in alive if m is not n
        ]
        if changes and n["demands_at"] < max(changes) + settle:
            return True
    return False


class IdleClock:
    """When each node was first seen with nothing running; the GCS reports usage, not idle
    time, so the autoscaler keeps this between ticks (and a restarted one starts afresh:
    it waits a full timeout again, erring toward keeping a node)."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def update(
        self, node_id: str, idle: bool, now: float, reported: float | None = None
    ) -> float | None:
        """``reported``: since when the node's raylet says it has held no lease (the GCS's
        ``idle_since``); the clock starts there rather than at this tick, which saw it a
        heartbeat and a tick late."""
        if not idle:
            self._since.pop(node_id, None)
            return None
        start = now if reported is None else min(now, float(reported))
        return self._since.setdefault(node_id, start)

    def since_map(self) -> dict[str, float]:
        """{node id: idle since} of the nodes idle now."""
        return dict(self._since)

    def forget_all_but(self, live: set[str]) -> None:
        for node_id in set(self._since) - live:
            del self._since[node_id]


def _is_idle(node: Mapping[str, Any]) -> bool:
    total = node.get("resources_total") or {}
    free = node.get("resources_available") or {}
    if node.get("pending_demands"):
        return False
    return all(abs(float(free.get(k, 0.0)) - float(v)) < 1e-9 for k, v in total.items())


def nodes_from_cluster_info(
    info: Mapping[str, Any], head_node_type: str, clock: IdleClock, now: float
) -> list[NodeView]:
    """The alive nodes as the scheduler sees them (see the module's docstring)."""
    out = []
    for node in info.get("nodes") or ():
        if node.get("state") != "ALIVE":
            continue
        raw_id = node["node_id"]  # bytes from the GCS, hex from the dashboard
        node_id = raw_id.hex() if isinstance(raw_id, bytes) else str(raw_id)
        is_head = bool(node.get("is_head"))
        node_type = (
            head_node_type
            if is_head
            else (node.get("labels") or {}).get(NODE_TYPE_LABEL, UNMANAGED)
        )
        managed = not is_head and node_type != UNMANAGED
        idle = (
            clock.update(node_id, _is_idle(node), now, node.get("idle_since")) if managed else None
        )
        out.append(
            NodeView(
                node_id,
                node_type,
                shape_of(node.get("resources_total")),
                shape_of(node.get("resources_available")),
                idle_since=idle,
                is_head=is_head,
            )
        )
    clock.forget_all_but({n.node_id for n in out})
    return out
