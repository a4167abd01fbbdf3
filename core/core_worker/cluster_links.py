"""A core worker's view of the other nodes: their raylets, where objects live, who died.

Kept apart from ``core_worker.py`` so that the single-node hot path stays as it is; the core
worker calls in here only when something involves another node:
- lease requests that spill over (or go straight to the node holding a task's large
  arguments) need a connection to that node's raylet (``raylet_for_node``);
- a ``get`` of an object held on another node asks the local raylet to pull it
  (``pull_to_local``); the owner records every node holding a copy (``locations``), so a
  copy survives its first node's death;
- ``node_dead`` from the GCS closes the leases on that node (their tasks retry) and stops
  reads from it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any, Protocol

from ember import config
from ember.core_worker.locations import lost_location
from ember.core_worker.memory_store import MemoryStore
from ember.core_worker.reference_counter import ReferenceCounter
from ember.core_worker.task_spec import ARG_REF
from ember.exceptions import ObjectLostError
from ember.gcs_link import GcsLink
from ember.protocol import connection as conn_mod
from ember.protocol.connection import Connection
from ember.protocol.messages.raylet import PullFailed

logger = logging.getLogger(__name__)


class _TaskSubmitter(Protocol):
    def on_node_dead(self, node_id: bytes) -> None: ...


class ClusterLinksHost(Protocol):
    """What the cluster links need of the rest of the core worker."""

    mode: str
    node: dict[str, Any]
    node_id: bytes
    worker_id: bytes
    job_id: bytes
    log_to_driver: bool
    handlers: dict[str, Any]  # this process's ops, served on other raylets' connections too
    raylet: Connection
    gcs: GcsLink
    loop: asyncio.AbstractEventLoop
    memory_store: MemoryStore
    refs: ReferenceCounter
    task_submitter: _TaskSubmitter

    def owns(self, object_id: bytes) -> bool: ...
    def call_raylet_sync(self, op: str, body: Any, timeout: float = 30.0) -> Any: ...
    async def connect_to_worker(self, worker_id: bytes | None, address: str) -> Connection: ...


class ClusterLinks:
    def __init__(self, host: ClusterLinksHost) -> None:
        self.host = host
        self.raylets: dict[bytes, Connection] = {}  # {node_id: TCP connection to its raylet}
        self.node_addresses: dict[bytes, str] = {}  # {node_id: raylet TCP address}
        self.dead_nodes: set[bytes] = set()
        # {object_id: nodes holding a copy} for objects this process owns (beyond the first)
        self.locations: dict[bytes, set[bytes]] = {}
        self.failed_all = False  # pending objects were failed: the head or our node is gone

    # -- raylets of other nodes ------------------------------------------------------------
    async def raylet_for_node(self, node_id: bytes, address: str | None = None) -> Connection:
        host = self.host
        if node_id == host.node_id:
            return host.raylet
        conn = self.raylets.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        if address is None:
            address = self.node_addresses.get(node_id)
            if address is None:
                await self.refresh_nodes()
                address = self.node_addresses.get(node_id)
            if not address:
                raise ConnectionError(f"node {node_id.hex()[:12]} has no reachable raylet")
        conn = await conn_mod.connect(address, host.handlers, name=f"raylet:{node_id.hex()[:8]}")
        self.raylets[node_id] = conn
        return conn

    async def refresh_nodes(self) -> None:
        nodes = await self.host.gcs.call("list_nodes", None, timeout=config.gcs_rpc_timeout)
        for n in nodes:
            if n.get("tcp_address"):
                self.node_addresses[n["node_id"]] = n["tcp_address"]
            if n["state"] == "DEAD":
                self.dead_nodes.add(n["node_id"])

    def locality_node(self, spec: Any) -> bytes | None:
        """The node holding most of the task's shared-memory arguments, if that is another
        node and the bytes there are worth moving the work for."""
        if spec.strategy not in (None, "DEFAULT") or not self.node_addresses_known():
            return None
        by_node: dict[bytes, int] = {}
        store = self.host.memory_store
        for a in spec.args:
            if a[0] != ARG_REF:
                continue
            loc = store.get_if_ready(a[1])
            if loc is None or loc[0] != "plasma":
                continue
            by_node[loc[1]] = by_node.get(loc[1], 0) + loc[2]
        if not by_node:
            return None
        node, size = max(by_node.items(), key=lambda kv: kv[1])
        if node == self.host.node_id or node in self.dead_nodes:
            return None
        if size < config.locality_min_bytes or by_node.get(self.host.node_id, 0) >= size:
            return None
        return node

    def node_addresses_known(self) -> bool:
        # Only a cluster node (TCP) can lease elsewhere; an embedded node has one raylet.
        return bool(self.host.node.get("token_file"))

    # -- objects on other nodes ------------------------------------------------------------
    def pull_to_local(self, object_id: bytes, node_id: bytes, size: int, owner: Any) -> str:
        """Asks the local raylet to copy the object here; '' on success, else why not."""
        host = self.host
        candidates = [node_id]
        if host.owns(object_id):
            candidates += [n for n in self.locations.get(object_id, ()) if n != node_id]
        reason = "no node holds it"
        alive_failure = ""
        for source in candidates:
            for _attempt in range(3):  # a live source may fail once (a restart, a race)
                if source in self.dead_nodes:
                    reason = f"its node {source.hex()[:12]} died"
                    break
                timeout = max(60.0, size / (20 * 1024 * 1024))
                # The store's own errors (ObjectStoreFullError: no room for a copy here) are
                # raised as they are; a failed pull says whether the source is gone.
                try:
                    host.call_raylet_sync(
                        "pull_object",
                        {"object_id": object_id, "node_id": source, "owner": owner},
                        timeout=timeout,
                    )
                except PullFailed as e:
                    reason = e.reason
                    if e.node_gone:
                        self.dead_nodes.add(source)  # the GCS no longer lists it
                        break
                    alive_failure = reason
                    continue
                self.note_copy(object_id, owner)
                return ""
        if alive_failure and not all(n in self.dead_nodes for n in candidates):
            # Not lost, only unreadable now: rebuilding it would race the live copy.
            raise ObjectLostError(object_id.hex(), f"it could not be fetched: {alive_failure}")
        return reason

    def note_copy(self, object_id: bytes, owner: Any) -> None:
        """Tells the owner this node now holds a copy too."""
        host = self.host
        if owner is None or owner[0] == host.worker_id:
            self.locations.setdefault(object_id, set()).add(host.node_id)
            return
        body = {"object_id": object_id, "node_id": host.node_id}

        async def send() -> None:
            try:
                conn = await host.connect_to_worker(owner[0], owner[1])
                conn.send("add_location", body)
            except Exception:
                pass  # the owner is gone: nobody to tell

        host.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(send()))

    def h_add_location(self, conn: Connection, body: dict) -> None:
        if self.host.refs.has(body["object_id"]):
            self.locations.setdefault(body["object_id"], set()).add(body["node_id"])

    def best_location(self, object_id: bytes, loc: tuple) -> tuple:
        """For a borrower asking where an owned object is: a live copy if the first died."""
        if loc[0] != "plasma" or loc[1] not in self.dead_nodes:
            return loc
        for node in self.locations.get(object_id, ()):
            if node not in self.dead_nodes:
                return ("plasma", node, loc[2])
        return loc

    def take_copies(self, object_id: bytes, loc: tuple | None) -> set[bytes]:
        """The nodes holding shared-memory copies of a freed object (forgetting them)."""
        extra = self.locations.pop(object_id, None) if self.locations else None
        if loc is None or loc[0] != "plasma":
            return set()
        return {loc[1], *extra} if extra else {loc[1]}

    def delete_remote(self, object_id: bytes, nodes: set[bytes]) -> None:
        """On the I/O thread: asks other nodes' raylets to drop their copies."""
        for node_id in nodes:
            if node_id == self.host.node_id or node_id in self.dead_nodes:
                continue

            async def send(node_id: bytes = node_id) -> None:
                try:
                    raylet = await self.raylet_for_node(node_id)
                    raylet.send("plasma_delete", {"object_ids": [object_id]})
                except Exception:
                    pass  # that node is gone, and its copy with it

            asyncio.ensure_future(send())

    # -- worker output from other nodes ----------------------------------------------------
    def wants_remote_logs(self) -> bool:
        host = self.host
        return host.mode == "driver" and host.log_to_driver and self.node_addresses_known()

    async def subscribe_all_logs(self) -> None:
        """A driver asks every other node's raylet for its job's worker output."""
        await self.refresh_nodes()
        for node_id in list(self.node_addresses):
            if node_id not in self.dead_nodes:
                await self._subscribe_logs(node_id)

    async def _subscribe_logs(self, node_id: bytes) -> None:
        if node_id == self.host.node_id:
            return
        try:
            raylet = await self.raylet_for_node(node_id)
            raylet.send("subscribe_logs", {"job_id": self.host.job_id})
        except Exception as e:
            logger.info("no worker output from node %s: %s", node_id.hex()[:12], e)

    def h_node_added(self, conn: Connection, body: dict) -> None:
        if body.get("tcp_address"):
            self.node_addresses[body["node_id"]] = body["tcp_address"]
        if self.wants_remote_logs():
            asyncio.ensure_future(self._subscribe_logs(body["node_id"]))

    # -- membership ------------------------------------------------------------------------
    def h_node_dead(self, conn: Connection, body: dict) -> None:
        node_id = body["node_id"]
        self.dead_nodes.add(node_id)
        # The driver says so; workers only log it (their stderr would echo to the driver). A
        # node that was drained first (the autoscaler removing an idle node) left as planned:
        # not a warning every driver prints for each node of a scale-down.
        if body.get("drained"):
            logger.info("node %s left after draining", node_id.hex()[:12])
        else:
            log = logger.warning if self.host.mode == "driver" else logger.info
            log("node %s died: %s", node_id.hex()[:12], body.get("reason", ""))
        raylet = self.raylets.pop(node_id, None)
        if raylet is not None:
            raylet.close("its node died")
        self.host.task_submitter.on_node_dead(node_id)

    def on_gcs_lost(self, why: str) -> None:
        """A driver of a cluster lost the head: nothing pending can finish. Say so now."""
        if self.node_addresses_known():
            self._fail_pending(self._head_gone(why))

    def on_node_lost(self, why: str) -> None:
        """A driver's own raylet went away. Its node stops when the head is gone too, and then
        the head is the cause to name: give the GCS connection a moment to say so."""
        if not self.node_addresses_known():
            return

        def fail() -> None:
            if self.host.gcs is not None and not self.host.gcs.connected:
                self._fail_pending(self._head_gone(self.host.gcs.close_reason))
            else:
                self._fail_pending(f"the node this driver runs on stopped (its raylet: {why})")

        self.host.loop.call_later(0.5, fail)

    def local_node_lost(self) -> bool:
        """True when lease failures should wait for on_node_lost's clearer error."""
        return self.node_addresses_known() and self.host.raylet.closed

    def _head_gone(self, why: str) -> str:
        return (
            f"the connection to the cluster's GCS at {self.host.node['gcs_address']} was lost "
            f"({why}): the head node is gone"
        )

    def _fail_pending(self, msg: str) -> None:
        if self.failed_all:
            return
        self.failed_all = True
        print(f"(ember) Error: {msg}", file=sys.stderr, flush=True)
        host = self.host
        for oid in host.memory_store.pending_ids():
            host.memory_store.put(oid, lost_location(oid, ObjectLostError, msg))

    def close(self) -> None:
        for conn in self.raylets.values():
            conn.close("shutdown")
