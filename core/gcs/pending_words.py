"""Why an actor waits, in the user's terms: the placement group by its name and the bundle
by its index, the resources it asked for, and what is free where it could run, never the
internal names a group's resources have on a node (``CPU_group_0_<pg id>``,
``bundle_group_0_<pg id>``: see ``resources.pg_resource_name``)."""

from __future__ import annotations

from typing import Any

from ember.resources import fmt, pg_resource_name

# A reason names at most this many nodes, so a 1,000-node cluster keeps it short.
REASON_NODES = 5


def per_node(nodes: list[Any], say: Any) -> str:
    """``say(node)`` for the first nodes, ``"; "``-joined, with how many were left out."""
    text = "; ".join(say(n) for n in nodes[:REASON_NODES])
    if len(nodes) > REASON_NODES:
        text += f"; and {len(nodes) - REASON_NODES} more nodes"
    return text


def free_of(node: Any, shape: dict[str, float], names: dict[str, str] | None = None) -> str:
    """ "{CPU: 0} of {CPU: 1} on node 1a2b3c4d": the resources asked for, free and in all, on
    one node (``names`` maps each asked name to the node's name for it, a group's)."""
    names = names or {k: k for k in shape}
    now = fmt({k: node.available.get(names[k], 0.0) for k in shape})
    total = fmt({k: node.total.get(names[k], 0.0) for k in shape})
    return f"{now} of {total} on node {node.node_id.hex()[:8]}"


def group_of(strategy: Any) -> tuple[bytes, int] | None:
    """(placement group id, bundle index or -1) of a placement-group strategy, else None."""
    if isinstance(strategy, tuple) and strategy and strategy[0] == "PLACEMENT_GROUP":
        return strategy[1], int(strategy[2])
    return None


def in_group(shape: dict[str, float], strategy: Any, groups: Any, nodes: list[Any]) -> str:
    """Why an actor of a placement group waits: "placement group 'trainers', bundle 0: needs
    {CPU: 1}, free {CPU: 0} of {CPU: 1} on node 1a2b3c4d"."""
    pg_id, index = group_of(strategy) or (b"", -1)
    pg = groups.groups.get(pg_id) if groups is not None else None
    label = f"placement group {pg.name!r}" if pg is not None and pg.name else None
    label = label or f"placement group {pg_id.hex()[:12]}"
    where = f"bundle {index}" if index >= 0 else "any bundle"
    needs = f"{label}, {where}: needs {fmt(shape)}"
    if pg is None:
        return f"{needs}, but the group is unknown (removed?)"
    state = pg.state.name
    if state == "REMOVED":
        return f"{needs}, but the group was removed"
    if index >= len(pg.bundles):
        return f"{needs}, but the group has only {len(pg.bundles)} bundles"
    if state != "CREATED":
        why = f": {pg.reason}" if pg.reason else ""
        return f"{needs}; the group is {state} (not placed yet{why})"
    pg_hex = pg_id.hex()
    names = {k: pg_resource_name(k, pg_hex, index) for k in shape}
    held = {n for i, n in enumerate(pg.placement) if n is not None and (index < 0 or i == index)}
    on = [n for n in nodes if n.node_id in held]
    if not on:
        return f"{needs}; the node holding it is gone (the group is being placed again)"
    return f"{needs}, free {per_node(on, lambda n: free_of(n, shape, names))}"
