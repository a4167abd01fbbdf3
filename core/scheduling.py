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


class NodeView:
    """One node as a raylet sees it when placing a lease request."""

    __slots__ = ("node_id", "total", "available")

    def __init__(self, node_id: bytes, total: dict[str, float], available: dict[str, float]):
        self.node_id = node_id
        self.total = total
        self.available = available


# A lease request moves on at once at most this many times (views a heartbeat old can
# disagree); after that, only once it has waited RESPILL_AFTER_S where it is, so it never
# bounces faster than views refresh, yet never waits on a full node while another has room.
MAX_SPILLS = 4
RESPILL_AFTER_S = 1.0


def lease_decision(
    here: NodeView,
    others: Sequence[NodeView],
    shape: dict[str, float],
    strategy: Any,
    *,
    spilled: int = 0,
    spread: int = 0,
    waited: float = 0.0,
) -> tuple[str, Any]:
    """Where a task's lease request should wait, decided by the raylet that got it.

    Returns ``("local", None)`` (wait here: it fits now or will), ``("spill", node)`` (ask
    that node instead), ``("infeasible", None)`` (no node can ever hold it: wait here until
    one joins) or ``("fail", message)`` (hard node affinity to a node that is gone). ``shape``
    is already renamed for placement groups. ``spilled`` is how many raylets sent the request
    on before this one (0: it came from its owner's node); ``waited`` how long it has waited
    at this raylet.
    """
    if isinstance(strategy, tuple) and strategy[0] == "NODE_AFFINITY":
        target, soft = strategy[1], strategy[2]
        node = (
            here
            if target == here.node_id
            else next((n for n in others if n.node_id == target), None)
        )
        if node is None and not soft:
            return "fail", (
                f"node {target.hex()} named by NodeAffinitySchedulingStrategy(soft=False) "
                "is not alive; pass soft=True to run elsewhere"
            )
        if node is not None and fits(shape, node.total):
            if node is here or spilled:
                return "local", None
            return "spill", node
        if node is not None and not soft:
            # As Ray: a hard affinity the node can never satisfy fails at once.
            return "fail", (
                f"the task asks for {shape}, which node {target.hex()} named by "
                "NodeAffinitySchedulingStrategy(soft=False) does not have "
                f"({node.total}); pass soft=True to run elsewhere"
            )
        # soft affinity to a node that cannot: anywhere, as the default strategy would
    if spilled:
        # Another raylet chose us: it waits here, unless it cannot start here now and another
        # node has room for it now (as Ray's raylet spills the tasks waiting on it). A burst
        # sent to the first node that joined spreads over the nodes that join after it; a
        # node merely as busy as this one never gets it, so work does not bounce around;
        # and after MAX_SPILLS quick moves it moves on only after waiting RESPILL_AFTER_S
        # (a burst of 20 had requests left on full nodes while 12 nodes stood idle).
        settled = spilled >= MAX_SPILLS and waited < RESPILL_AFTER_S
        if settled or fits(shape, here.available) or not fits(shape, here.total):
            return "local", None
        free = [n for n in others if fits(shape, n.available)]
        return ("spill", min(free, key=_load)) if free else ("local", None)
    if strategy == "SPREAD":
        candidates = [n for n in (here, *others) if fits(shape, n.available)]
        if candidates:
            pick = candidates[spread % len(candidates)]
            return ("local", None) if pick is here else ("spill", pick)
    if fits(shape, here.available):
        return "local", None
    free = [n for n in others if fits(shape, n.available)]
    if free:
        return "spill", min(free, key=_load)
    if fits(shape, here.total):
        return "local", None  # busy now; it frees up here or spills when another node does
    able = [n for n in others if fits(shape, n.total)]
    if able:
        return "spill", min(able, key=_load)
    return "infeasible", None
