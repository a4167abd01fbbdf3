"""Ownership between processes: what happens when an owned object is freed, and borrowing.

The reference counter (``reference_counter.py``) decides when; this module does the rest: a
freed object leaves the memory store and every node's shared memory; a freed actor handle
object ends its actor (``created_actors.py``); a borrower registers refs it just
deserialized with their owners, and tells them when it lets go; ``ember memory`` reads this
process's table from here.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any, Protocol

from ember.core_worker.locations import lost_location
from ember.core_worker.memory_store import MemoryStore
from ember.core_worker.reference_counter import Ref, ReferenceCounter
from ember.exceptions import OwnerDiedError
from ember.protocol.connection import Connection


class _Links(Protocol):
    def take_copies(self, object_id: bytes, loc: tuple | None) -> set[bytes]: ...
    def delete_remote(self, object_id: bytes, nodes: set[bytes]) -> None: ...


class _Lineage(Protocol):
    specs: dict

    def forget(self, object_id: bytes) -> None: ...


class _Actors(Protocol):
    def out_of_scope(self, handle_object_id: bytes) -> None: ...


class _Pins(Protocol):
    def forget(self, object_id: bytes) -> None: ...


class _Objects(Protocol):
    plasma_views: dict[bytes, tuple[int, int]]
    pins: _Pins


class OwnershipHost(Protocol):
    """What ownership needs of the rest of the core worker."""

    raylet: Connection
    shutting_down: bool
    links: _Links
    lineage: _Lineage
    actors: _Actors
    objects: _Objects

    def send_threadsafe(self, conn: Connection | None, op: str, body: Any) -> None: ...
    def run_sync(self, coro: Any, timeout: float | None) -> Any: ...
    async def connect_to_worker(self, worker_id: bytes | None, address: str) -> Connection: ...


class Ownership:
    def __init__(
        self,
        host: OwnershipHost,
        *,
        worker_id: bytes,
        node_id: bytes,
        memory_store: MemoryStore,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.host = host
        self.worker_id = worker_id
        self.node_id = node_id
        self.memory_store = memory_store
        self.loop = loop
        # Set by the core worker once made: the counter calls back into this object.
        self.refs: ReferenceCounter = None  # type: ignore[assignment]

    def h_collect_garbage(self, conn: Connection, body: Any) -> None:
        """The node's store needs room: collect cycles now (their refs then go back), on a
        thread of its own so the loop keeps answering meanwhile. A user who turned the
        collector off (``gc.disable()``) still gets this one, as on Ray."""
        threading.Thread(target=gc.collect, name="ember-gc", daemon=True).start()

    def owns(self, object_id: bytes) -> bool:
        ref = self.refs.get(object_id)
        return ref is not None and ref.owned

    def on_free(self, object_id: bytes, ref: Ref) -> None:
        self.host.objects.pins.forget(object_id)  # before the delete: it frees at once then
        loc = self.memory_store.delete(object_id)
        copies = self.host.links.take_copies(object_id, loc)
        if self.host.lineage.specs:
            self.host.lineage.forget(object_id)
        if ref.is_actor_handle:
            self.loop.call_soon_threadsafe(self.host.actors.out_of_scope, object_id)
        if copies and not self.host.shutting_down:
            if self.node_id in copies:
                self.host.send_threadsafe(
                    self.host.raylet, "plasma_delete", {"object_ids": [object_id]}
                )
            if len(copies) > 1 or self.node_id not in copies:  # copies on other nodes too
                self.loop.call_soon_threadsafe(self.host.links.delete_remote, object_id, copies)

    def on_borrow_released(self, object_id: bytes, owner) -> None:
        self.host.objects.pins.forget(object_id)
        self.memory_store.delete(object_id)
        if not self.host.shutting_down:
            self.loop.call_soon_threadsafe(self.send_remove_borrower, object_id, owner)

    def send_remove_borrower(self, object_id: bytes, owner) -> None:
        async def send() -> None:
            try:
                conn = await self.host.connect_to_worker(owner[0], owner[1])
                conn.send("remove_borrower", {"object_id": object_id, "borrower": self.worker_id})
            except Exception:
                pass  # the owner is gone; nothing to release

        asyncio.ensure_future(send())

    def register_new_borrows(self) -> None:
        """Registers refs just deserialized with their owners; waits for their acks."""
        pending = self.refs.take_new_borrows()
        if not pending:
            return
        by_owner: dict[bytes, tuple[Any, list[bytes]]] = {}
        for object_id, owner in pending:
            self.refs.add_local(object_id, owner)  # hold until the ObjectRef takes over
            by_owner.setdefault(owner[0], (owner, []))[1].append(object_id)

        async def register() -> None:
            async def one(owner, ids):
                try:
                    conn = await self.host.connect_to_worker(owner[0], owner[1])
                    await conn.call(
                        "add_borrower", {"object_ids": ids, "borrower": self.worker_id}, 10.0
                    )
                except Exception:
                    for oid in ids:
                        self.memory_store.put(oid, lost_location(oid, OwnerDiedError))

            await asyncio.gather(*(one(o, ids) for o, ids in by_owner.values()))

        try:
            self.host.run_sync(register(), 15.0)
        finally:
            for object_id, _ in pending:
                self.refs.remove_local(object_id)

    def h_add_borrower(self, conn: Connection, body: dict) -> list[bool]:
        borrower = body["borrower"]
        return [self.refs.add_borrower(oid, borrower) for oid in body["object_ids"]]

    def h_remove_borrower(self, conn: Connection, body: dict) -> None:
        self.refs.remove_borrower(body["object_id"], body["borrower"], body.get("count", 1))

    def h_may_exit(self, conn: Connection, body: Any) -> bool:
        """The raylet wants to retire this idle worker: not while it owns objects in use."""
        return not any(ref.owned for _, ref in self.refs.snapshot())

    def reference_table(self) -> list[dict]:
        """This process's refs for ``ember memory`` (Ray 0.8's ``ray memory`` table)."""
        rows = []
        snapshot = self.refs.snapshot()
        listed = {object_id for object_id, _ in snapshot}
        for object_id, (n, size) in list(self.host.objects.plasma_views.items()):
            if object_id not in listed and n > 0:
                rows.append(
                    {
                        "object_id": object_id.hex(),
                        "owned": False,
                        "reference_types": ["PINNED_IN_MEMORY"],
                        "size": size,
                        "status": "-",
                        "call_site": "",
                        "in_plasma": True,
                        "borrowers": 0,
                    }
                )
        for object_id, ref in snapshot:
            loc = self.memory_store.get_if_ready(object_id)
            if ref.is_actor_handle:
                status, size = "-", -1
            elif loc is None:
                status, size = ("PENDING" if ref.owned else "-"), -1
            elif loc[0] == "inline":
                status = "FINISHED"
                size = len(loc[2]) + sum(len(b) for b in loc[3])
            else:
                status, size = "FINISHED", loc[2]
            rows.append(
                {
                    "object_id": object_id.hex(),
                    "owned": ref.owned,
                    "reference_types": self.refs.reference_types(ref),
                    "size": size if size >= 0 else ref.size,
                    "status": status,
                    "call_site": ref.call_site,
                    "in_plasma": bool(loc and loc[0] == "plasma"),
                    "borrowers": len(ref.borrowers or ()),
                }
            )
        return rows
