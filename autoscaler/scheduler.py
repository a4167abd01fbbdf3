"""The autoscaler's decision as a pure function: demand and the current nodes in, which nodes
to launch and which to terminate out. No I/O, no clock, no memory between calls, so every rule
is a table test; the reconciler (a later step) gathers the inputs and carries the decision out.

The rules, in the order applied (Ray's resource_demand_scheduler's order):
1. ``min_workers`` of every node type.
2. ``request_resources`` bundles: the cluster's *total* capacity must hold them (usage is
   ignored: it is a floor on the cluster's size, as Ray's ``request_resources``).
3. Placement groups before tasks: STRICT_SPREAD bundles each on a different node, STRICT_PACK
   bundles summed onto one node, PACK and SPREAD bundles as separate shapes (they may share a
   node, and the raylet spreads them where it can).
4. The shapes of queued leases and pending actors, onto free capacity.
Shapes are bin-packed first-fit decreasing (largest dominant share first) onto existing nodes
(busy ones first, so idle ones stay idle and can go), then nodes already launching, then new
nodes of the type that fits with least waste. Launches keep every type's ``max_workers`` and
the overall ``max_workers``; those for demand (step 4) are also limited by ``upscaling_speed``
as Ray limits them: pending + new <= max(5, speed x running nodes of the type). Steps 1-3 are
exempt, as in Ray: a user asking for a size is asking for it now.

A node is terminated when it has been idle (no running work) past its type's ``idle_s`` (the
config's ``idle_timeout_minutes``, or the type's ``idle_timeout_s``), is not the head, would not
leave its type below ``min_workers``, and no shape of this tick was packed onto it. A shape no
node type could ever hold is reported as infeasible, once per tick (``report_once`` makes it
once ever).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Shape = Mapping[str, float]

# Ray's AUTOSCALER_UPSCALING_INITIAL_NUM_NODES: a cluster may always grow by this many at once.
UPSCALING_INITIAL_NODES = 5
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass(frozen=True)
class NodeView:
    """A live node as the scheduler needs it. ``idle_since`` is None while it runs work."""

    node_id: str
    node_type: str
    total: Shape
    available: Shape
    idle_since: float | None = None
    is_head: bool = False


@dataclass(frozen=True)
class PlacementGroupDemand:
    bundles: tuple[Shape, ...]
    strategy: str = "PACK"

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy {self.strategy!r}: one of {', '.join(STRATEGIES)}")


@dataclass(frozen=True)
class Demand:
    shapes: tuple[Shape, ...] = ()  # queued leases and pending actors, one shape each
    placement_groups: tuple[PlacementGroupDemand, ...] = ()
    requested: tuple[Shape, ...] = ()  # request_resources bundles


@dataclass(frozen=True)
class Termination:
    node_id: str
    node_type: str
    reason: str


@dataclass
class Decision:
    launch: dict[str, int] = field(default_factory=dict)
    terminate: list[Termination] = field(default_factory=list)
    infeasible: list[dict[str, float]] = field(default_factory=list)  # no node type holds it
    unmet: list[dict[str, float]] = field(default_factory=list)  # fits a type; limits say wait
    # Why each type is launched: {node type: [reason per node]}, for the status record.
    reasons: dict[str, list[str]] = field(default_factory=dict)


def _clean(shape: Shape) -> dict[str, float]:
    return {k: float(v) for k, v in shape.items() if v}


def _fits(shape: Shape, free: Shape) -> bool:
    return all(free.get(k, 0.0) >= v - 1e-9 for k, v in shape.items())


def _key(shape: Shape) -> tuple:
    return tuple(sorted(shape.items()))


@dataclass(eq=False)  # bins are compared by identity: two empty nodes are still two
class _Bin:
    free: dict[str, float]
    node_type: str
    node_id: str | None = None  # None: a node not yet running (pending or new this tick)
    new: bool = False
    exempt: bool = False  # launched for min_workers, request_resources or a group
    why: str = ""  # what it is launched for: "min_workers", "request_resources"...
    shapes: list[dict[str, float]] = field(default_factory=list)

    def take(self, shape: dict[str, float]) -> None:
        for k, v in shape.items():
            self.free[k] = self.free.get(k, 0.0) - v
        self.shapes.append(shape)


class _Planner:
    def __init__(
        self,
        config: Mapping[str, Any],
        nodes: Sequence[NodeView],
        pending: Mapping[str, int],
        unavailable: Iterable[str] = (),
        leaving: Mapping[str, int] | None = None,
    ) -> None:
        self.unavailable = frozenset(unavailable)
        # Nodes on their way out (draining, terminating): no capacity, no min_workers, but
        # still machines the provider holds, so they count against max_workers.
        self.leaving = Counter({t: c for t, c in (leaving or {}).items() if c > 0})
        self.types: dict[str, Mapping[str, Any]] = dict(config["available_node_types"])
        self.max_total = int(config["max_workers"])
        self.speed = float(config.get("upscaling_speed", 1.0))
        # A type whose config leaves resources empty (a head detecting its own) takes them
        # from a live node of that type, as Ray does at runtime.
        self.caps = {name: _clean(t["resources"]) for name, t in self.types.items()}
        for n in nodes:
            if not self.caps.get(n.node_type) and n.node_type in self.caps:
                self.caps[n.node_type] = _clean(n.total)
        # Workers of the config's types; a node started by hand (no type) is capacity, not a
        # worker the autoscaler counts against max_workers.
        self.running = Counter(
            n.node_type for n in nodes if not n.is_head and n.node_type in self.types
        )
        self.pending = Counter({t: c for t, c in pending.items() if c > 0})
        self.launch: Counter[str] = Counter()
        self.exempt: Counter[str] = Counter()
        self.node_totals = [_clean(n.total) for n in nodes]
        # largest capacity per resource, for the dominant share that orders shapes
        self.largest: dict[str, float] = {}
        for cap in [*self.caps.values(), *self.node_totals]:
            for k, v in cap.items():
                self.largest[k] = max(self.largest.get(k, 0.0), v)
        self.infeasible: dict[tuple, dict[str, float]] = {}
        self.unmet: list[dict[str, float]] = []

    def size(self, shape: Shape) -> tuple:
        share = max(
            (v / self.largest[k] for k, v in shape.items() if self.largest.get(k)), default=0
        )
        return (-share, -len(shape), _key(shape))

    def ordered(self, shapes: Iterable[Shape]) -> list[dict[str, float]]:
        return sorted((_clean(s) for s in shapes), key=self.size)

    def workers(self) -> int:
        held = self.running + self.pending + self.launch + self.leaving
        return sum(held.values())

    def room(self, node_type: str) -> bool:
        have = self.running[node_type] + self.pending[node_type] + self.launch[node_type]
        have += self.leaving[node_type]
        return have < int(self.types[node_type]["max_workers"]) and self.workers() < self.max_total

    def feasible(self, shape: Shape) -> bool:
        return any(_fits(shape, c) for c in [*self.caps.values(), *self.node_totals])

    def choose_type(self, shape: Shape) -> str | None:
        """The type with room that holds ``shape`` wasting least: fewest resource kinds it
        does not use (no GPU node for a CPU task), then least left over, then by name."""
        best = None
        for name, cap in sorted(self.caps.items()):
            if not cap or not _fits(shape, cap) or not self.room(name):
                continue
            if name in self.unavailable:
                continue
            unused_kinds = sum(1 for k in cap if k not in shape)
            left = sum(
                (cap[k] - shape.get(k, 0.0)) / self.largest[k] for k in cap if self.largest[k]
            )
            score = (unused_kinds, left, name)
            if best is None or score < best[0]:
                best = (score, name)
        return best[1] if best else None

    def new_bin(self, node_type: str, exempt: bool, why: str) -> _Bin:
        self.launch[node_type] += 1
        if exempt:
            self.exempt[node_type] += 1
        return _Bin(dict(self.caps[node_type]), node_type, new=True, exempt=exempt, why=why)

    def place(
        self,
        shape: dict[str, float],
        bins: list[_Bin],
        exempt: bool,
        why: str,
        avoid: Sequence[_Bin] = (),
    ) -> _Bin | None:
        """First fit onto ``bins`` (skipping ``avoid``), else onto a new node; the bin used,
        or None when the shape is infeasible or the limits leave no room."""
        for b in bins:
            if _fits(shape, b.free) and not any(b is a for a in avoid):
                b.take(shape)
                return b
        if not self.feasible(shape):
            self.infeasible.setdefault(_key(shape), shape)
            return None
        node_type = self.choose_type(shape)
        if node_type is None:
            self.unmet.append(shape)
            return None
        b = self.new_bin(node_type, exempt, why)
        b.take(shape)
        bins.append(b)
        return b

    def limit_upscaling(self, bins: list[_Bin]) -> None:
        """Ray's concurrency limit on demand-driven launches; the shapes of cut nodes wait."""
        for node_type in list(self.launch):
            allowed = max(
                UPSCALING_INITIAL_NODES, int(self.speed * max(self.running[node_type], 1))
            )
            bound = max(allowed - self.pending[node_type], self.exempt[node_type])
            excess = self.launch[node_type] - bound
            for b in list(reversed(bins)):
                if excess <= 0:
                    break
                if b.new and not b.exempt and b.node_type == node_type:
                    bins.remove(b)
                    self.unmet.extend(b.shapes)
                    self.launch[node_type] -= 1
                    excess -= 1


def _live_bins(nodes: Sequence[NodeView], use_total: bool) -> list[_Bin]:
    # Busy nodes first, then idle ones most recently idle first: work packs onto nodes that
    # are busy anyway, and the longest idle are left free to go.
    order = sorted(
        nodes,
        key=lambda n: (n.idle_since is not None, -(n.idle_since or 0.0), n.node_id),
    )
    return [
        _Bin(_clean(n.total if use_total else n.available), n.node_type, node_id=n.node_id)
        for n in order
    ]


def schedule(
    config: Mapping[str, Any],
    nodes: Sequence[NodeView],
    demand: Demand,
    now: float,
    pending: Mapping[str, int] | None = None,
    unavailable: Iterable[str] = (),
    leaving: Mapping[str, int] | None = None,
) -> Decision:
    """Launch and terminate decisions for one tick (see the module's docstring).

    ``config`` is a prepared cluster config; ``nodes`` the live nodes, head included;
    ``pending`` the launches in flight per node type (requested, launching or joining);
    ``unavailable`` the types not to launch now (backing off after failures): demand they
    would hold waits, as unmet. ``leaving``: nodes per type draining or terminating (not in
    ``nodes``), counted against ``max_workers`` until the provider has let them go.
    """
    plan = _Planner(config, nodes, pending or {}, unavailable, leaving)

    # 1. min_workers
    for name in sorted(plan.types):
        short = int(plan.types[name]["min_workers"]) - plan.running[name] - plan.pending[name]
        for _ in range(max(short, 0)):
            if not plan.room(name) or name in plan.unavailable:
                break
            plan.new_bin(name, exempt=True, why=f"min_workers {plan.types[name]['min_workers']}")

    # 2. request_resources against total capacity (new nodes of step 1 count, empty)
    totals = _live_bins(nodes, use_total=True)
    totals += [_Bin(dict(plan.caps[t]), t) for t, c in plan.pending.items() for _ in range(c)]
    minimum = [
        _Bin(dict(plan.caps[t]), t, new=True, why=f"min_workers {plan.types[t]['min_workers']}")
        for t, c in plan.launch.items()
        for _ in range(c)
    ]
    totals += minimum
    for shape in plan.ordered(demand.requested):
        plan.place(shape, totals, exempt=True, why="request_resources")
    used_for_requests = {b.node_id for b in totals if b.node_id and b.shapes}

    # 3-4. groups, then tasks and actors, onto free capacity
    free = _live_bins(nodes, use_total=False)
    free += [_Bin(dict(plan.caps[t]), t) for t, c in plan.pending.items() for _ in range(c)]
    # The nodes new for request_resources hold nothing yet: their free capacity is whole.
    free += [
        _Bin(dict(plan.caps[b.node_type]), b.node_type, new=True, why=b.why)
        for b in totals
        if b.new
    ]
    for group in demand.placement_groups:
        bundles = plan.ordered(group.bundles)
        if group.strategy == "STRICT_PACK":
            combined: dict[str, float] = {}
            for b in bundles:
                for k, v in b.items():
                    combined[k] = combined.get(k, 0.0) + v
            plan.place(combined, free, exempt=True, why="placement group (STRICT_PACK)")
        elif group.strategy == "STRICT_SPREAD":
            used: list[_Bin] = []  # one node per bundle
            for shape in bundles:
                why = "placement group (STRICT_SPREAD)"
                placed = plan.place(shape, free, exempt=True, why=why, avoid=used)
                if placed is not None:
                    used.append(placed)
        else:
            for shape in bundles:
                plan.place(shape, free, exempt=True, why=f"placement group ({group.strategy})")
    for shape in plan.ordered(demand.shapes):
        plan.place(shape, free, exempt=False, why="queued tasks and pending actors")
    plan.limit_upscaling(free)
    needed = {b.node_id for b in free if b.node_id and b.shapes} | used_for_requests

    decision = Decision(
        launch={t: c for t, c in sorted(plan.launch.items()) if c > 0},
        infeasible=list(plan.infeasible.values()),
        unmet=plan.unmet,
        reasons=_reasons(free),
    )
    decision.terminate = _idle_terminations(config, nodes, plan, needed, now)
    return decision


def _reasons(bins: Sequence[_Bin]) -> dict[str, list[str]]:
    """Per launched type, one sentence per new node: what it is for and the shapes it holds."""
    out: dict[str, list[str]] = {}
    for b in bins:
        if not b.new:
            continue
        shapes = Counter(_key(s) for s in b.shapes)
        held = ", ".join(f"{n} x {dict(k)}" for k, n in sorted(shapes.items()))
        out.setdefault(b.node_type, []).append(f"{b.why}: {held}" if held else b.why)
    return out


def idle_timeout_s(config: Mapping[str, Any], node_type: str) -> float:
    own = config["available_node_types"].get(node_type, {}).get("idle_timeout_s")
    return float(own) if own is not None else float(config["idle_timeout_minutes"]) * 60.0


def _idle_terminations(
    config: Mapping[str, Any],
    nodes: Sequence[NodeView],
    plan: _Planner,
    needed: set[str],
    now: float,
) -> list[Termination]:
    left = Counter(plan.running)
    out = []
    idle = [n for n in nodes if not n.is_head and n.idle_since is not None]
    for n in sorted(idle, key=lambda n: (n.idle_since, n.node_id)):
        limit = idle_timeout_s(config, n.node_type)
        idle_for = now - n.idle_since
        if idle_for < limit or n.node_id in needed:
            continue
        min_workers = int(config["available_node_types"].get(n.node_type, {}).get("min_workers", 0))
        if left[n.node_type] <= min_workers:
            continue
        left[n.node_type] -= 1
        out.append(
            Termination(n.node_id, n.node_type, f"idle for {idle_for:.0f}s (limit {limit:.0f}s)")
        )
    return out


def report_once(reported: set[tuple], infeasible: Iterable[Shape]) -> list[dict[str, float]]:
    """The infeasible shapes not reported before; records them in ``reported``."""
    fresh = []
    for shape in infeasible:
        key = _key(_clean(shape))
        if key not in reported:
            reported.add(key)
            fresh.append(_clean(shape))
    return fresh
