"""The raylet's object-store service: the local store's ``plasma_*`` messages, copies of
objects between nodes (``pull_object`` for a local reader, ``export_object`` /
``unexport_object`` for another node's raylet reading from this one), and the end of objects
whose owner died. Making room (moving and spilling copies) and reading spilled objects back
is ``object_spiller``'s; this service calls it where a create does not fit and where a
get or an export finds the object on disk.

An owner frees its objects while it lives; once it is gone nobody can, so the raylets do:
the raylet an owner was connected to sees its connection close, deletes what it owned here
and tells the GCS (``owners_died``), which has every other raylet delete its copies
(``free_owned_objects``); a dead node's owners are freed on the GCS's ``node_dead``. A copy
made after that news (a task of the dead driver still finishing, a pull in flight) is
dropped as soon as it is written, so the raylet remembers recent dead owners.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import TYPE_CHECKING, Any

from ember import config
from ember.exceptions import ObjectStoreFullError
from ember.object_store.spill import SpillFiles, spill_dir_for
from ember.object_store.store import MoveNeeded, SpillNeeded, owner_key
from ember.protocol import connection as conn_mod
from ember.protocol.connection import Connection
from ember.protocol.messages.raylet import PullFailed
from ember.raylet.object_spiller import ObjectSpiller

if TYPE_CHECKING:
    from ember.raylet.raylet import Raylet

logger = logging.getLogger("ember.raylet")

# Dead owners remembered to drop late copies of their objects. A late copy comes from work
# already under way when the owner died (seconds), so the newest this many are plenty.
DEAD_OWNERS_KEPT = 100_000


class ObjectService:
    def __init__(self, raylet: Raylet) -> None:
        self.raylet = raylet
        self.store = raylet.store
        self.seal_waiters: dict[bytes, list[asyncio.Future]] = {}
        self.transfer: Any = None  # TransferServer of a cluster node
        self.pulls: dict[bytes, asyncio.Future] = {}  # {object_id: pull in progress}
        self.pull_slots = asyncio.Semaphore(config.max_concurrent_pulls)
        self.transfer_stats = {"active": 0, "peak": 0, "pulled": 0, "failed": 0, "bytes": 0}
        self.peer_raylets: dict[bytes, Connection] = {}  # {node_id: TCP connection}
        self._arena: Any = None
        # Object copies pulled from other nodes, for the timeline: (seq, record), bounded;
        # the agent asks for those after the last seq it saw (node_stats).
        self.transfer_log: collections.deque = collections.deque(maxlen=1000)
        self.transfer_seq = 0
        self.dead_owners: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self.dead_owner_nodes: set[bytes] = set()
        # Totals for node_stats: dead owners heard of, their objects freed here, and copies
        # of theirs dropped as soon as written ("late").
        self.owned_freed = {"owners": 0, "objects": 0, "late": 0}
        self.spiller = ObjectSpiller(
            self.store,
            lambda: self.arena,
            _spill_files(raylet),
            config.object_spilling_threshold,
            config.object_spilling_batch_bytes,
            config.object_store_full_grace_seconds,
            self.ask_for_gc,
        )
        self._gc_asked_at = -1e9

    def ask_for_gc(self) -> None:
        """The store needs room: every worker and driver of this node collects garbage (at
        most once per ``config.object_store_gc_interval_s``), since objects only reference
        cycles keep alive would otherwise be spilled or fail the create."""
        now = time.monotonic()
        if now - self._gc_asked_at < config.object_store_gc_interval_s:
            return
        self._gc_asked_at = now
        conns = [w.conn for w in self.raylet.pool.workers.values()]
        conns += list(self.raylet.drivers.values())
        for conn in conns:
            if conn is not None and not conn.closed:
                conn.send("collect_garbage", {})
        logger.info("object store needs room: asked %d processes to collect garbage", len(conns))

    # -- owners that died ------------------------------------------------------------------
    def owners_died(self, owner_ids: list[bytes], tell_cluster: bool) -> None:
        """Deletes every object here owned by these (dead) owners; with ``tell_cluster``
        (the owner was this node's client), has the GCS tell every other node too."""
        for owner_id in owner_ids:
            self.dead_owners[owner_id] = None
            self.dead_owners.move_to_end(owner_id)
        while len(self.dead_owners) > DEAD_OWNERS_KEPT:
            self.dead_owners.popitem(last=False)
        freed = self.store.delete_owned_by(owner_ids)
        self.spiller.room_freed()
        self.owned_freed["owners"] += len(owner_ids)
        self.owned_freed["objects"] += len(freed)
        if freed:
            logger.info(
                "freed %d objects of %d dead owners (%s)",
                len(freed),
                len(owner_ids),
                ", ".join(o.hex()[:12] for o in owner_ids[:4]),
            )
        gcs = self.raylet.gcs
        if tell_cluster and gcs is not None and not gcs.closed:
            gcs.send("owners_died", {"worker_ids": owner_ids})

    def owner_node_died(self, node_id: bytes) -> None:
        """Every process of a dead node is gone, owners included: its raylet cannot say so."""
        self.dead_owner_nodes.add(node_id)
        owners = self.store.owners_on_node(node_id)
        if owners:
            self.owners_died(owners, tell_cluster=False)

    def h_free_owned_objects(self, conn: Connection, body: dict) -> None:
        self.owners_died(list(body["owner_ids"]), tell_cluster=False)

    def _orphaned(self, owner: Any) -> bool:
        """True if the object's owner is known dead: a copy of it would never be freed."""
        owner_id = owner_key(owner)
        if owner_id is not None and owner_id in self.dead_owners:
            return True
        return (
            isinstance(owner, tuple | list)
            and len(owner) > 2
            and (owner[2] in self.dead_owner_nodes)
        )

    def connection_closed(self, conn: Connection) -> None:
        """Objects another raylet was reading through ``conn`` are no longer pinned for it."""
        for oid in conn.state.pop("exports", ()):
            self.transfer.unexport(oid)
            self.store.release(oid, ("export", id(conn)))

    # -- plasma ----------------------------------------------------------------------------
    def h_plasma_create(self, conn: Connection, body: dict) -> Any:
        oid = body["object_id"]
        if self.store.contains(oid):
            # A re-run of the task that made it (a retry, a rebuild): the new copy replaces
            # the old, which readers that pinned it keep until they let go.
            logger.info("object %s is written again; replacing the old copy", oid.hex()[:16])
            self.store.delete(oid)
        owner, size, client = body.get("owner"), body["size"], body.get("client")
        try:
            offset = self.store.create(oid, size, client, owner=owner)
        except (MoveNeeded, SpillNeeded, ObjectStoreFullError) as e:
            if not self.spiller.may_make_room(e):
                raise
            return self._create_later(oid, size, client, owner, e)
        self.spiller.check_high_water()
        return self._created(oid, owner, offset)

    async def _create_later(
        self, oid: bytes, size: int, client: Any, owner: Any, first: Exception
    ) -> int:
        """A create that must wait for copies to move or spill (``first``: why)."""
        offset = await self.spiller.create(oid, size, client, owner, primary=True, pending=first)
        return self._created(oid, owner, offset)

    def _created(self, oid: bytes, owner: Any, offset: int) -> int:
        if self._orphaned(owner):
            # A late result of a dead owner's task: the writer still fills and seals it
            # (its memory is freed then), but no reader will ever find it.
            self.store.delete(oid)
            self.owned_freed["late"] += 1
        return offset

    def h_plasma_seal(self, conn: Connection, body: dict) -> None:
        oid = body["object_id"]
        self.store.seal(oid)
        self._wake_readers(oid)
        self.spiller.check_high_water()  # a sealed primary may now be spilled

    def _wake_readers(self, oid: bytes) -> None:
        for fut in self.seal_waiters.pop(oid, ()):
            if not fut.done():
                fut.set_result(None)

    async def h_plasma_get(self, conn: Connection, body: dict) -> tuple[int, int] | None:
        return await self._get_sealed(body["object_id"], body["client"])

    async def _get_sealed(self, oid: bytes, client: Any) -> tuple[int, int] | None:
        """The object pinned for ``client``, waiting (30 s at most) for it to be sealed if it
        is being written: its writer's seal may trail the reply that made it known."""
        got = self.store.get(oid, client)
        if got is not None:
            return got
        # On disk: read it back, then pin it (it could be dropped again before we pin it,
        # if room is needed that very moment: a few tries).
        for _ in range(3):
            if not await self.spiller.restore(oid):
                break
            got = self.store.get(oid, client)
            if got is not None:
                return got
        if not self._is_unsealed(oid):
            return None
        fut = asyncio.get_running_loop().create_future()
        self.seal_waiters.setdefault(oid, []).append(fut)
        try:
            await asyncio.wait_for(fut, 30.0)
        except TimeoutError:
            return None
        return self.store.get(oid, client)

    def _is_unsealed(self, oid: bytes) -> bool:
        return self.store.size_of(oid) is not None and not self.store.contains(oid)

    async def h_plasma_get_many(self, conn: Connection, body: dict) -> list[tuple[int, int] | None]:
        client = body["client"]
        got: list[tuple[int, int] | None] = []
        try:
            for oid in body["object_ids"]:
                got.append(await self._get_sealed(oid, client))
        except Exception:
            # The caller gets the error, not the pins taken so far: give them back (e.g. no
            # room to read the next one back from disk with the others held).
            for oid, pinned in zip(body["object_ids"], got, strict=False):
                if pinned is not None:
                    self.store.release(oid, client, pinned[0])
            self.spiller.room_freed()
            raise
        return got

    def h_plasma_release(self, conn: Connection, body: dict) -> None:
        self.store.release(body["object_id"], body["client"], body.get("offset"))
        self.spiller.room_freed()

    def h_plasma_delete(self, conn: Connection, body: dict) -> None:
        for oid in body["object_ids"]:
            self.store.delete(oid)
        self.spiller.room_freed()

    def h_plasma_abort(self, conn: Connection, body: dict) -> None:
        self.store.abort(body["object_id"])

    # -- objects across nodes --------------------------------------------------------------
    @property
    def arena(self) -> Any:
        if self._arena is None:
            from ember.object_store.arena import Arena

            args = self.raylet.args
            self._arena = Arena(args.arena_path, args.object_store_memory)
        return self._arena

    def record_transfer(
        self, object_id: bytes, from_node: bytes, size: int, start: float, end: float
    ) -> None:
        """One object copied here from another node (called where a pull completes)."""
        self.transfer_seq += 1
        self.transfer_log.append(
            (
                self.transfer_seq,
                {
                    "object_id": object_id.hex(),
                    "from_node": from_node.hex(),
                    "to_node": self.raylet.node_id.hex(),
                    "size": size,
                    "start": start,
                    "end": end,
                },
            )
        )

    async def h_pull_object(self, conn: Connection, body: dict) -> None:
        """A local client wants an object that lives on another node: copy it here (once,
        however many ask), then it reads it like any local object. Raises ``PullFailed``
        (or the store's error) when it cannot."""
        oid = body["object_id"]
        if self.store.contains(oid):
            return
        pending = self.pulls.get(oid)
        if pending is None:
            pending = asyncio.ensure_future(self._pull(oid, body["node_id"], body.get("owner")))
            self.pulls[oid] = pending
            pending.add_done_callback(lambda f, oid=oid: self._pull_done(oid, f))
        await asyncio.shield(pending)

    def _pull_done(self, oid: bytes, pull: asyncio.Future) -> None:
        self.pulls.pop(oid, None)
        if not pull.cancelled():
            pull.exception()  # retrieved: the askers got it (or left), nothing to log twice

    async def _pull(self, oid: bytes, node_id: bytes, owner: Any) -> None:
        view = self.raylet.view
        node = view.by_id.get(node_id)
        gcs = self.raylet.gcs
        if node is None and gcs is not None and not gcs.closed:
            # It may have joined since the last heartbeat: ask the GCS now.
            self.raylet.membership.set_view(await gcs.call("get_cluster_view", None, timeout=10.0))
            node = view.by_id.get(node_id)
        if node is None:
            raise PullFailed(f"its node {node_id.hex()[:12]} is not alive", node_gone=True)
        async with self.pull_slots:  # bounded: a burst of gets cannot swamp the network
            if self.store.contains(oid):
                return
            stats = self.transfer_stats
            stats["active"] += 1
            stats["peak"] = max(stats["peak"], stats["active"])
            try:
                await self._pull_locked(oid, node_id, node, owner)
            except Exception:
                stats["failed"] += 1
                raise
            else:
                stats["pulled"] += 1
            finally:
                stats["active"] -= 1

    async def _pull_locked(self, oid: bytes, node_id: bytes, node: dict, owner: Any) -> None:
        from ember.object_store.transfer import TransferError, pull_into

        try:
            peer = await self.peer_raylet(node_id)
            size = await peer.call("export_object", {"object_id": oid}, timeout=30.0)
        except Exception as e:
            raise PullFailed(f"its node {node_id.hex()[:12]} is unreachable: {e}") from None
        if size is None:
            raise PullFailed(f"node {node_id.hex()[:12]} no longer holds it")
        try:
            offset = await self.spiller.create(oid, size, ("pull", oid), owner, primary=False)
        except Exception:
            peer.send("unexport_object", {"object_id": oid})
            raise  # e.g. ObjectStoreFullError: no room for a copy here
        view = self.arena.writable_view(offset, size)
        loop = asyncio.get_running_loop()
        started = time.time()
        timeout = max(30.0, size / (50 * 1024 * 1024))
        try:
            await loop.run_in_executor(
                None,
                lambda: pull_into(
                    node["data_address"],
                    conn_mod.cluster_token() or b"",
                    oid,
                    view,
                    chunk_size=config.object_transfer_chunk_size,
                    window=config.object_transfer_window,
                    timeout=timeout,
                ),
            )
        except (TransferError, OSError) as e:
            self.store.abort(oid)
            raise PullFailed(f"the transfer from {node_id.hex()[:12]} failed: {e}") from None
        finally:
            view.release()
            if not peer.closed:
                peer.send("unexport_object", {"object_id": oid})
        self.store.seal(oid)
        self._wake_readers(oid)
        if self._orphaned(owner):  # its owner died during the transfer
            self.store.delete(oid)
            self.owned_freed["late"] += 1
        logger.info("pulled %s (%d bytes) from %s", oid.hex()[:16], size, node_id.hex()[:12])
        self.transfer_stats["bytes"] += size
        self.record_transfer(oid, node_id, size, started, time.time())  # for the timeline

    async def h_export_object(self, conn: Connection, body: dict) -> int | None:
        """Another raylet is about to read this object: pin it until it says it is done."""
        oid = body["object_id"]
        client = ("export", id(conn))
        got = await self._get_sealed(oid, client)
        if got is None or self.transfer is None:
            return None
        offset, size = got
        self.transfer.export(oid, offset, size)
        conn.state.setdefault("exports", []).append(oid)
        return size

    def h_unexport_object(self, conn: Connection, body: dict) -> None:
        oid = body["object_id"]
        exports = conn.state.get("exports", [])
        if oid in exports:
            exports.remove(oid)
            self.transfer.unexport(oid)
            self.store.release(oid, ("export", id(conn)))

    async def peer_raylet(self, node_id: bytes) -> Connection:
        conn = self.peer_raylets.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        node = self.raylet.view.by_id[node_id]
        conn = await conn_mod.connect(
            node["tcp_address"], self.raylet.handlers, name=f"raylet:{node_id.hex()[:8]}"
        )
        self.peer_raylets[node_id] = conn
        return conn

    def drop_peer(self, node_id: bytes, reason: str) -> None:
        """Closes the connection to a node that left the cluster, if there is one."""
        peer = self.peer_raylets.pop(node_id, None)
        if peer is not None:
            peer.close(reason)


def _spill_files(raylet: Raylet) -> SpillFiles | None:
    """Where this raylet spills (``--spill-dir``, else under the configured directory or
    the session directory), or None when spilling is off."""
    if not config.automatic_object_spilling_enabled:
        return None
    args = raylet.args
    directory = getattr(args, "spill_dir", None) or spill_dir_for(
        config.object_spilling_directory or args.session_dir, raylet.node_id.hex()
    )
    max_bytes = getattr(args, "spill_max_bytes", None)
    return SpillFiles(
        directory,
        config.object_spilling_max_bytes if max_bytes is None else max_bytes,
        config.local_fs_capacity_threshold,
    )
