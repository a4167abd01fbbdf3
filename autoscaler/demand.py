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
from typing import Any

from ember.autoscaler.scheduler import Demand, NodeView, PlacementGroupDemand, Shape
from ember.resources import waiting_bundles

NODE_TYPE_LABEL = "ember.io/node-type"
UNMANAGED = ""  # the node type of a node the autoscaler did not start


# A placement group's own resources on the nodes holding its bundles (CPU_group_<id>,
# CPU_group_0_<id>, bundle_group_<id>...): work queued inside a group asks for these, and it is
# the group's bundles, already demand of their own, that make room for it.
_GROUP_RESOURCE = re.compile(r"_group_(\d+_)?[0-9a-f]{32}$")


def _shape(raw: Mapping[str, Any] | None) -> dict[str, float]:
    return {k: float(v) for k, v in (raw or {}).items() if v}


def _in_group(shape: Mapping[str, float]) -> bool:
    return any(_GROUP_RESOURCE.search(k) for k in shape)


def demand_from_cluster_info(info: Mapping[str, Any], requested: Iterable[Shape] = ()) -> Demand:
    """Queued leases and pending actors as shapes (one per waiting request), and the bundles
    still unplaced of each pending or rescheduling placement group, with its strategy."""
    shapes: list[dict[str, float]] = []
    for node in info.get("nodes") or ():
        if node.get("state") != "ALIVE":
            continue
        for d in node.get("pending_demands") or ():
            shapes += [_shape(d["shape"])] * int(d.get("count", 1))
    for actor in info.get("pending_actors") or ():
        shapes.append(_shape(actor.get("resources")))
    shapes = [s for s in shapes if not _in_group(s)]
    groups = []
    for g in info.get("placement_groups") or ():
        bundles = waiting_bundles(g)
        if bundles:
            strategy = g.get("strategy") or "PACK"
            groups.append(PlacementGroupDemand(tuple(_shape(b) for b in bundles), strategy))
    return Demand(
        shapes=tuple(s for s in shapes if s),
        placement_groups=tuple(groups),
        requested=tuple(_shape(r) for r in requested),
    )


class IdleClock:
    """When each node was first seen with nothing running; the GCS reports usage, not idle
    time, so the autoscaler keeps this between ticks (and a restarted one starts afresh:
    it waits a full timeout again, erring toward keeping a node)."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def update(self, node_id: str, idle: bool, now: float) -> float | None:
        if not idle:
            self._since.pop(node_id, None)
            return None
        return self._since.setdefault(node_id, now)

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
        idle = clock.update(node_id, _is_idle(node), now) if managed else None
        out.append(
            NodeView(
                node_id,
                node_type,
                _shape(node.get("resources_total")),
                _shape(node.get("resources_available")),
                idle_since=idle,
                is_head=is_head,
            )
        )
    clock.forget_all_but({n.node_id for n in out})
    return out
