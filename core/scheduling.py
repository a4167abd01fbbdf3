"""Choosing a node for a task or actor: used by the GCS for actors and by raylets to spill
tasks over to other nodes. Pure functions over node views; no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from ember.resources import apply_strategy, fits


def pick_node(
    nodes: Sequence[Any],
    shape: dict[str, float],
    strategy: Any,
    *,
    needs_cpu_node: bool = False,
    placement_groups: Any = None,
    local_node_id: bytes | None = None,
) -> Any | None:
    """The node to run on now, or None when none has the resources free.

    ``nodes`` have ``node_id``, ``total`` and ``available`` (dicts of floats).
    """
    shape = apply_strategy(shape, strategy)
    candidates = [n for n in nodes if fits(shape, n.available)]
    if needs_cpu_node:
        candidates = [n for n in candidates if n.total.get("CPU", 0) > 0]
    if not candidates:
        return None
    if isinstance(strategy, tuple) and strategy[0] == "NODE_AFFINITY":
        _, node_id, soft = strategy[:3]
        for n in candidates:
            if n.node_id == node_id:
                return n
        return random.choice(candidates) if soft else None
    if strategy == "SPREAD":
        return min(candidates, key=lambda n: _load(n))
    if local_node_id is not None:
        for n in candidates:
            if n.node_id == local_node_id:
                return n
    # Pack: prefer the busiest node that still fits, so idle nodes stay idle.
    return max(candidates, key=lambda n: _load(n))


def feasible_anywhere(nodes: Sequence[Any], shape: dict[str, float], strategy: Any) -> bool:
    shape = apply_strategy(shape, strategy)
    if isinstance(strategy, tuple) and strategy[0] == "PLACEMENT_GROUP":
        return True  # the group may still be being created
    return any(fits(shape, n.total) for n in nodes)


def _load(node: Any) -> float:
    total = node.total.get("CPU", 0) or 1
    return 1 - node.available.get("CPU", 0) / total
