"""Placement groups in the GCS: reserve bundles of resources on nodes, all or nothing.

A reserved bundle turns into renamed resources on its node (``CPU_group_<pg>`` and
``CPU_group_<i>_<pg>``, as Ray does), so tasks and actors placed in the group simply ask for
those names and the ordinary schedulers do the rest.

A group is PENDING until every bundle is reserved (CREATED), and REMOVED when its owner
removes it or its non-detached job ends; REMOVED is final. A CREATED group that loses
bundles with a dead node goes RESCHEDULING (as Ray's): it keeps its other bundles where they
are, its lost ones are reserved again on live nodes when there is room (its strategy still
holds: STRICT_SPREAD avoids the nodes it kept), and it is CREATED again once all are. What
ran in a lost bundle died with the node; actors restart in the bundle's new place by their
own ``max_restarts``, since they ask for the bundle's renamed resources wherever they are.
"""

from __future__ import annotations

import asyncio
import pickle
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember.lifecycle import Lifecycle, LifecycleState, Track
from ember.resources import fits, fmt

if TYPE_CHECKING:
    from ember.gcs.storage import Store


class PgState(LifecycleState):
    """Member names are the strings GCS replies carry."""

    PENDING = "PENDING"
    CREATED = "CREATED"
    RESCHEDULING = "RESCHEDULING"  # bundles lost with a dead node are being placed again
    REMOVED = "REMOVED"


PG_LIFECYCLE: Lifecycle[PgState] = Lifecycle(
    "placement group",
    {
        PgState.PENDING: {"reserved": PgState.CREATED, "removed": PgState.REMOVED},
        PgState.CREATED: {"bundles_lost": PgState.RESCHEDULING, "removed": PgState.REMOVED},
        PgState.RESCHEDULING: {
            "bundles_lost": PgState.RESCHEDULING,  # another of its nodes died meanwhile
            "reserved": PgState.CREATED,
            "removed": PgState.REMOVED,
        },
    },
)

PLACING = frozenset({PgState.PENDING, PgState.RESCHEDULING})  # states with bundles to place


def _nothing(*args: Any) -> None:
    pass


class _Group:
    def __init__(self, body: dict) -> None:
        self.body = body  # as created: what storage keeps, with the fields below
        self.pg_id: bytes = body["pg_id"]
        self.bundles: list[dict[str, float]] = body["bundles"]
        self.strategy: str = body.get("strategy", "PACK")
        self.name: str = body.get("name", "")
        self.job_id: bytes = body.get("job_id", b"")
        self.detached: bool = body.get("detached", False)
        self.track: Track[PgState] = PG_LIFECYCLE.track(self.pg_id.hex(), PgState.PENDING)
        # The node of each bundle; None for one not reserved (yet, or again).
        self.placement: list[bytes | None] = [None] * len(self.bundles)
        self.waiters: list[asyncio.Future] = []
        self.created_at = time.time()
        self.reason = ""

    @property
    def state(self) -> PgState:
        return self.track.state

    def record(self) -> bytes:
        return pickle.dumps((self.body, self.track.state.name, self.placement, self.created_at))

    @classmethod
    def from_record(cls, data: bytes) -> _Group:
        body, state, placement, created_at = pickle.loads(data)
        pg = cls(body)
        pg.track = PG_LIFECYCLE.track(pg.pg_id.hex(), PgState[state])
        if placement:  # else a group that was PENDING: nothing placed
            pg.placement = placement
        pg.created_at = created_at
        return pg

    def public(self) -> dict[str, Any]:
        return {
            "placement_group_id": self.pg_id.hex(),
            "name": self.name,
            "bundles": self.bundles,
            "strategy": self.strategy,
            "state": self.track.state.name,
            "bundle_nodes": [n.hex() if n else None for n in self.placement],
            "reason": self.reason,
            "job_id": self.job_id.hex(),
            "detached": self.detached,
            "created_at": self.created_at,
        }


class PlacementGroupManager:
    """``nodes`` is the GCS's node table (``nodes.py``): where bundles are reserved."""

    def __init__(self, nodes: Any, record: Callable[[str, str], None] = _nothing) -> None:
        self.nodes = nodes
        self.record = record  # (severity, message): a cluster event
        self.groups: dict[bytes, _Group] = {}  # {pg_id: _Group}, removed ones too (listings)
        # {pg_id: _Group} of the PENDING and RESCHEDULING ones: what a change of capacity
        # retries. Removed groups stay listed, so scanning every group on each removal grew
        # without bound.
        self.pending: dict[bytes, _Group] = {}
        # Groups with an attempt to place them in flight, and those asked to try again once
        # it ends: two attempts at once would reserve a bundle twice, and the loser's
        # release would free the winner's.
        self._placing_now: set[bytes] = set()
        self._again: set[bytes] = set()
        self.store: Store | None = None

    def _save(self, pg: _Group) -> None:
        if self.store is not None:
            self.store.mark("placement_groups", pg.pg_id, pg.record)

    def restore(self, rows: dict[bytes, bytes]) -> None:
        """The groups a previous GCS process knew. A created group's bundles stay reserved
        on their raylets, which outlived that process; a pending or rescheduling one has
        its unplaced bundles placed once nodes reconnect."""
        for pg_id, data in rows.items():
            pg = _Group.from_record(data)
            self.groups[pg_id] = pg
            if pg.state in PLACING:
                self.pending[pg_id] = pg

    def h_create_placement_group(self, conn: Any, body: dict) -> dict:
        pg = _Group(body)
        if pg.strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ValueError(
                f"Invalid placement group strategy {pg.strategy!r}: use PACK, SPREAD, "
                "STRICT_PACK or STRICT_SPREAD."
            )
        if not pg.bundles or any(not b or not isinstance(b, dict) for b in pg.bundles):
            raise ValueError("A placement group needs a list of non-empty resource dicts.")
        if pg.pg_id in self.groups:  # sent again: the first reply was lost with a GCS process
            return {"ok": True}
        self.groups[pg.pg_id] = pg
        self._save(pg)
        self.pending[pg.pg_id] = pg
        asyncio.ensure_future(self._place(pg))
        return {"ok": True}

    async def _place(self, pg: _Group) -> None:
        if pg.state not in PLACING:
            return
        if pg.pg_id in self._placing_now:
            self._again.add(pg.pg_id)
            return
        self._placing_now.add(pg.pg_id)
        try:
            await self._attempt(pg)
        finally:
            self._placing_now.discard(pg.pg_id)
        if pg.pg_id in self._again:
            self._again.discard(pg.pg_id)
            if pg.state in PLACING:
                asyncio.ensure_future(self._place(pg))

    async def _attempt(self, pg: _Group) -> None:
        """One try at reserving every unplaced bundle of ``pg``, all or none of them."""
        nodes = self.nodes.placeable()
        plan = _plan(pg, nodes)
        if plan is None:
            if not pg.reason:  # its first wait for room: demand for the autoscaler
                self.nodes.on_demand()
            pg.reason = _why(pg, nodes)
            return
        by_node: dict[bytes, list] = {}
        for i, node in plan.items():
            by_node.setdefault(node.node_id, []).append((i, pg.bundles[i]))
            # Book it in our view now so a second group does not take the same room.
            for k, v in pg.bundles[i].items():
                node.available[k] = node.available.get(k, 0) - v
        done: list[tuple[Any, list]] = []
        ok = True
        for node_id, bundles in by_node.items():
            node = self.nodes.nodes[node_id]
            try:
                if await node.conn.call("reserve_bundles", {"pg_id": pg.pg_id, "bundles": bundles}):
                    done.append((node, bundles))
                else:
                    ok = False
            except Exception:
                ok = False
            if not ok:
                break
        if not ok or pg.state not in PLACING:
            for node, bundles in done:
                # Only what this attempt reserved: a rescheduling group keeps its others there.
                indexes = [i for i, _ in bundles]
                node.conn.send("release_bundles", {"pg_id": pg.pg_id, "indexes": indexes})
            pg.reason = "resources were taken while reserving; will retry"
            return
        for i, node in plan.items():
            pg.placement[i] = node.node_id
        if None in pg.placement:  # a node it kept died meanwhile: those go again
            self._save(pg)
            self._again.add(pg.pg_id)
            return
        pg.track.fire("reserved")
        self._save(pg)
        self.pending.pop(pg.pg_id, None)
        pg.reason = ""
        for fut in pg.waiters:
            if not fut.done():
                fut.set_result(True)
        pg.waiters.clear()
        # A node that died while we waited for its reply: those bundles are lost already.
        for node_id in {n.node_id for n in plan.values()}:
            if self.nodes.get_alive(node_id) is None:
                self.on_node_died(node_id)

    def on_node_died(self, node_id: bytes) -> None:
        """Bundles reserved on a dead node are lost: their groups go RESCHEDULING and those
        bundles are placed again (``on_node_change``, which the server calls next)."""
        for pg in list(self.groups.values()):
            if pg.state is PgState.REMOVED or node_id not in pg.placement:
                continue
            lost = [i for i, n in enumerate(pg.placement) if n == node_id]
            for i in lost:
                pg.placement[i] = None
            pg.track.fire("bundles_lost")
            pg.reason = f"placing bundles {lost} again (lost with node {node_id.hex()[:12]})"
            self._save(pg)
            self.pending[pg.pg_id] = pg
            self.record(
                "WARNING",
                f"placement group {pg.pg_id.hex()} lost bundles {lost} with node "
                f"{node_id.hex()}: rescheduling them",
            )

    def h_remove_placement_group(self, conn: Any, body: dict) -> None:
        pg = self.groups.get(body["pg_id"])
        if pg is not None:  # an unknown group: nothing to remove, as for a removed one
            self._remove(pg)

    def _remove(self, pg: _Group) -> None:
        if pg.state is not PgState.REMOVED:  # removing twice only wakes waiters again
            pg.track.fire("removed")
            self._save(pg)
            self.pending.pop(pg.pg_id, None)
        for fut in pg.waiters:
            if not fut.done():
                fut.set_result(False)
        pg.waiters.clear()
        # Every bundle it holds (a rescheduling group holds some; a pending one none).
        for node_id in {n for n in pg.placement if n is not None}:
            node = self.nodes.get_alive(node_id)
            if node is not None:
                node.conn.send("release_bundles", {"pg_id": pg.pg_id})
        self.on_node_change()

    async def h_wait_placement_group(self, conn: Any, body: dict) -> bool:
        pg = self.groups.get(body["pg_id"])
        if pg is None or pg.state is PgState.REMOVED:
            return False
        if pg.state is PgState.CREATED:
            return True
        fut = asyncio.get_running_loop().create_future()
        pg.waiters.append(fut)
        timeout = body.get("timeout")
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            # Gone from the list: a group that never fits, polled with pg.wait(timeout),
            # would otherwise keep one future per call.
            if fut in pg.waiters:
                pg.waiters.remove(fut)
            return False

    def h_get_placement_group(self, conn: Any, body: dict) -> dict | None:
        pg_id = body.get("pg_id")
        if pg_id is None and body.get("name"):
            for g in self.groups.values():
                if g.name == body["name"] and g.state is not PgState.REMOVED:
                    return g.public() | {"pg_id": g.pg_id}
            return None
        pg = self.groups.get(pg_id)
        return None if pg is None else pg.public() | {"pg_id": pg.pg_id}

    def h_list_placement_groups(self, conn: Any, body: Any) -> list[dict]:
        return [g.public() for g in self.groups.values()]

    def reconcile_bundles(self, node: Any, held: dict[bytes, list[int]]) -> None:
        """``held``: the bundles ({pg_id: [index]}) a node's raylet has reserved, as it
        registers again after a GCS restart. Those this GCS does not place there (reserved
        for the old process, which died before storing the group's placement; or of a group
        removed meanwhile) are released."""
        for pg_id, indexes in held.items():
            pg = self.groups.get(pg_id)
            if pg is None or pg.state is PgState.REMOVED:
                node.conn.send("release_bundles", {"pg_id": pg_id})
                continue
            stray = [
                i for i in indexes if i >= len(pg.placement) or pg.placement[i] != node.node_id
            ]
            if stray:
                node.conn.send("release_bundles", {"pg_id": pg_id, "indexes": stray})

    def on_node_change(self) -> None:
        for pg in list(self.pending.values()):
            asyncio.ensure_future(self._place(pg))

    def on_job_finished(self, job_id: bytes) -> None:
        for pg in list(self.groups.values()):
            if pg.job_id == job_id and not pg.detached and pg.state is not PgState.REMOVED:
                self._remove(pg)


def _plan(pg: _Group, nodes: list) -> dict[int, Any] | None:
    """A node for each unplaced bundle ({index: node}) honouring the strategy with the
    bundles the group keeps, or None if they cannot all be placed now."""
    todo = [i for i, n in enumerate(pg.placement) if n is None]
    kept = {n for n in pg.placement if n is not None}
    if pg.strategy == "STRICT_PACK" and kept:
        nodes = [n for n in nodes if n.node_id in kept]  # all on the one node it kept
    if pg.strategy == "STRICT_SPREAD":
        nodes = [n for n in nodes if n.node_id not in kept]
    if not nodes:
        return None
    avail = {n.node_id: dict(n.available) for n in nodes}

    def take(node, bundle) -> bool:
        a = avail[node.node_id]
        if not fits(bundle, a):
            return False
        for k, v in bundle.items():
            a[k] = a.get(k, 0) - v
        return True

    if pg.strategy in ("PACK", "STRICT_PACK"):
        # The nodes it kept bundles on first, so what it packed stays together.
        order = sorted(nodes, key=lambda n: (n.node_id not in kept, -sum(n.available.values())))
        for node in order:
            saved = dict(avail[node.node_id])
            if all(take(node, pg.bundles[i]) for i in todo):
                return dict.fromkeys(todo, node)
            avail[node.node_id] = saved
        if pg.strategy == "STRICT_PACK":
            return None
    if pg.strategy == "STRICT_SPREAD" and len(nodes) < len(todo):
        return None
    plan: dict[int, Any] = {}
    used = set(kept) if pg.strategy == "SPREAD" else set()
    for i in todo:
        order = sorted(nodes, key=lambda n: (n.node_id in used, -sum(avail[n.node_id].values())))
        placed = None
        for node in order:
            if pg.strategy == "STRICT_SPREAD" and node.node_id in used:
                continue
            if take(node, pg.bundles[i]):
                placed = node
                break
        if placed is None:
            return None
        plan[i] = placed
        used.add(placed.node_id)
    return plan


def _why(pg: _Group, nodes: list) -> str:
    todo = [i for i, n in enumerate(pg.placement) if n is None]
    for i in todo:
        if not any(fits(pg.bundles[i], n.total) for n in nodes):
            return f"infeasible: no node can hold the bundle {fmt(pg.bundles[i])}"
    if pg.state is PgState.RESCHEDULING:
        return f"waiting for resources to place bundles {todo} again (lost with a dead node)"
    return "waiting for resources"
