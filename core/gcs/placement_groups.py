"""Placement groups in the GCS: reserve bundles of resources on nodes, all or nothing.

A reserved bundle turns into renamed resources on its node (``CPU_group_<pg>`` and
``CPU_group_<i>_<pg>``, as Ray does), so tasks and actors placed in the group simply ask for
those names and the ordinary schedulers do the rest.

A group is PENDING until every bundle is reserved (CREATED), and REMOVED when its owner
removes it or its non-detached job ends; REMOVED is final.
"""

from __future__ import annotations

import asyncio
import pickle
import time
from typing import TYPE_CHECKING, Any

from ember.lifecycle import Lifecycle, LifecycleState, Track
from ember.resources import fits, fmt

if TYPE_CHECKING:
    from ember.gcs.storage import Store


class PgState(LifecycleState):
    """Member names are the strings GCS replies carry."""

    PENDING = "PENDING"
    CREATED = "CREATED"
    REMOVED = "REMOVED"


PG_LIFECYCLE: Lifecycle[PgState] = Lifecycle(
    "placement group",
    {
        PgState.PENDING: {"reserved": PgState.CREATED, "removed": PgState.REMOVED},
        PgState.CREATED: {"removed": PgState.REMOVED},
    },
)


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
        self.placement: list[bytes] = []  # node id per bundle
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
            "bundle_nodes": [n.hex() for n in self.placement],
            "reason": self.reason,
            "job_id": self.job_id.hex(),
            "detached": self.detached,
            "created_at": self.created_at,
        }


class PlacementGroupManager:
    """``nodes`` is the GCS's node table (``nodes.py``): where bundles are reserved."""

    def __init__(self, nodes: Any) -> None:
        self.nodes = nodes
        self.groups: dict[bytes, _Group] = {}  # {pg_id: _Group}, removed ones too (listings)
        # {pg_id: _Group} of the PENDING ones: what a change of capacity retries. Removed
        # groups stay listed, so scanning every group on each removal grew without bound.
        self.pending: dict[bytes, _Group] = {}
        self._placing = False
        self.store: Store | None = None

    def _save(self, pg: _Group) -> None:
        if self.store is not None:
            self.store.mark("placement_groups", pg.pg_id, pg.record)

    def restore(self, rows: dict[bytes, bytes]) -> None:
        """The groups a previous GCS process knew. A created group's bundles stay reserved
        on their raylets, which outlived that process; a pending one is placed again once
        nodes reconnect."""
        for pg_id, data in rows.items():
            pg = _Group.from_record(data)
            self.groups[pg_id] = pg
            if pg.state is PgState.PENDING:
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
        if pg.state is not PgState.PENDING:
            return
        nodes = self.nodes.alive()
        plan = _plan(pg, nodes)
        if plan is None:
            pg.reason = _why(pg, nodes)
            return
        by_node: dict[bytes, list] = {}
        for i, node in enumerate(plan):
            by_node.setdefault(node.node_id, []).append((i, pg.bundles[i]))
            # Book it in our view now so a second group does not take the same room.
            for k, v in pg.bundles[i].items():
                node.available[k] = node.available.get(k, 0) - v
        done: list[Any] = []
        ok = True
        for node_id, bundles in by_node.items():
            node = self.nodes.nodes[node_id]
            try:
                if await node.conn.call("reserve_bundles", {"pg_id": pg.pg_id, "bundles": bundles}):
                    done.append(node)
                else:
                    ok = False
            except Exception:
                ok = False
            if not ok:
                break
        if not ok or pg.state is not PgState.PENDING:
            for node in done:
                node.conn.send("release_bundles", {"pg_id": pg.pg_id})
            pg.reason = "resources were taken while reserving; will retry"
            return
        pg.placement = [n.node_id for n in plan]
        pg.track.fire("reserved")
        self._save(pg)
        self.pending.pop(pg.pg_id, None)
        pg.reason = ""
        for fut in pg.waiters:
            if not fut.done():
                fut.set_result(True)
        pg.waiters.clear()

    def h_remove_placement_group(self, conn: Any, body: dict) -> None:
        pg = self.groups.get(body["pg_id"])
        if pg is not None:  # an unknown group: nothing to remove, as for a removed one
            self._remove(pg)

    def _remove(self, pg: _Group) -> None:
        was_created = pg.state is PgState.CREATED
        if pg.state is not PgState.REMOVED:  # removing twice only wakes waiters again
            pg.track.fire("removed")
            self._save(pg)
            self.pending.pop(pg.pg_id, None)
        for fut in pg.waiters:
            if not fut.done():
                fut.set_result(False)
        pg.waiters.clear()
        if was_created:
            for node_id in set(pg.placement):
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

    def on_node_change(self) -> None:
        for pg in list(self.pending.values()):
            asyncio.ensure_future(self._place(pg))

    def on_job_finished(self, job_id: bytes) -> None:
        for pg in list(self.groups.values()):
            if pg.job_id == job_id and not pg.detached and pg.state is not PgState.REMOVED:
                self._remove(pg)


def _plan(pg: _Group, nodes: list) -> list | None:
    """A node per bundle honouring the strategy, or None if it cannot be placed now."""
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
        for node in sorted(nodes, key=lambda n: -sum(n.available.values())):
            saved = dict(avail[node.node_id])
            if all(take(node, b) for b in pg.bundles):
                return [node] * len(pg.bundles)
            avail[node.node_id] = saved
        if pg.strategy == "STRICT_PACK":
            return None
    if pg.strategy == "STRICT_SPREAD" and len(nodes) < len(pg.bundles):
        return None
    plan, used = [], set()
    for bundle in pg.bundles:
        order = sorted(nodes, key=lambda n: (n.node_id in used, -sum(avail[n.node_id].values())))
        placed = None
        for node in order:
            if pg.strategy == "STRICT_SPREAD" and node.node_id in used:
                continue
            if take(node, bundle):
                placed = node
                break
        if placed is None:
            return None
        plan.append(placed)
        used.add(placed.node_id)
    return plan


def _why(pg: _Group, nodes: list) -> str:
    for bundle in pg.bundles:
        if not any(fits(bundle, n.total) for n in nodes):
            return f"infeasible: no node can hold the bundle {fmt(bundle)}"
    return "waiting for resources"
