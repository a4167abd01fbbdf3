"""This node's membership of the cluster: registering with the GCS, heartbeats (resources and
demands out, the cluster view back), other nodes leaving, and joining again under a new node
id when the GCS gave up on this one.

Messages it serves (from the GCS): ``declared_dead``, ``node_dead``, ``node_added``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from typing import TYPE_CHECKING, Any

from ember import config
from ember.gcs_link import GcsLink
from ember.protocol import connection as conn_mod
from ember.protocol.connection import Connection
from ember.protocol.messages.gcs import NodeDeclaredDead
from ember.raylet import lease_events as ev

if TYPE_CHECKING:
    from ember.raylet.raylet import Raylet

logger = logging.getLogger("ember.raylet")


EARLY_BEAT_GAP_S = 0.05  # the least time between two heartbeats


class Membership:
    def __init__(self, raylet: Raylet) -> None:
        self.raylet = raylet
        self.gcs: GcsLink | None = None
        self._rejoining = False
        # Whether the last heartbeat reported waiting work; when work starts waiting on a
        # queue the GCS last heard was empty, the next beat goes at once (``beat_soon``), so
        # the autoscaler hears of a burst without waiting out the interval.
        self.demand_reported = False
        self._beat_now: asyncio.Event | None = None
        self._last_beat = 0.0

    def registration(self) -> dict[str, Any]:
        r = self.raylet
        args = r.args
        return {
            "node_id": r.node_id,
            "address": args.address,
            "tcp_address": r.tcp_address,
            "data_address": r.objects.transfer.address if r.objects.transfer else "",
            "node_ip": args.node_ip,
            "resources": r.resources.total_dict(),
            "labels": getattr(args, "labels", None) or {},
            "session_dir": r.session_dir,
            "arena_path": args.arena_path,
            "object_store_memory": args.object_store_memory,
            "hostname": socket.gethostname(),
            "is_head": args.head,
            "pid": os.getpid(),
            # What this node holds for the GCS, checked by a GCS started again against
            # what it read back: replies that died with the old one left it things it
            # does not know of (``NodeTable.on_reregistered``).
            "actor_leases": r.leases.actor_leases(),
            "bundles": r.bundle_report(),
        }

    async def connect_gcs(self) -> None:
        self.gcs = GcsLink(
            self.raylet.args.gcs_address,
            self.raylet.handlers,
            on_reconnect=self._registered_again,
            on_lost=self._gcs_lost,
        )
        await self.gcs.connect(config.process_start_timeout)
        reply = await self.gcs.call("register_node", self.registration(), timeout=30.0)
        self.set_view(reply.get("view", []))

    async def _registered_again(self, conn: Connection) -> None:
        """A new GCS process (the old one died; it read this node back from storage): the
        same node registers again, with its workers, leases and objects as they are."""
        try:
            reply = await conn.call("register_node", self.registration(), timeout=30.0)
        except NodeDeclaredDead:
            # It gave up on this node meanwhile: join as a new one once the link is up.
            asyncio.ensure_future(self.rejoin_as_new("the GCS declared this node dead"))
            return
        self.set_view(reply.get("view", []))

    async def refresh_view(self) -> None:
        """A fresh view for lease requests about to fail (a node they name may have joined
        since the last heartbeat)."""
        try:
            view = await self.gcs.call("get_cluster_view", None, timeout=10.0)
        except Exception as e:
            logger.warning("could not refresh the cluster view: %s", e)
            view = None
        if view is not None:
            self._replace_view(view)
        self.raylet.leases.handle(ev.ViewRefreshed())

    def set_view(self, view: list[dict]) -> None:
        self._replace_view(view)
        self.raylet.leases.handle(ev.ViewChanged())

    def _replace_view(self, view: list[dict]) -> None:
        r = self.raylet
        r.view.replace(view, r.node_id)
        for node_id in list(r.objects.peer_raylets):
            if node_id not in r.view.by_id:
                r.objects.drop_peer(node_id, "its node left the cluster")

    def _gcs_lost(self, reason: str) -> None:
        if not self.raylet.stopping:
            logger.error("lost the GCS (%s); the node shuts down", reason)
            os.kill(os.getpid(), signal.SIGTERM)

    def beat_soon(self) -> None:
        if self._beat_now is not None:
            self._beat_now.set()

    async def _until_next_beat(self) -> None:
        """The interval, or less when ``beat_soon`` asks; never two beats within
        EARLY_BEAT_GAP_S (a queue that empties and fills again at a high rate would
        otherwise beat at that rate)."""
        if self._beat_now is None:
            self._beat_now = asyncio.Event()
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(self._beat_now.wait(), config.heartbeat_interval)
            await asyncio.sleep(max(0.0, self._last_beat + EARLY_BEAT_GAP_S - loop.time()))
        except TimeoutError:
            pass
        self._beat_now.clear()
        self._last_beat = loop.time()

    async def heartbeat(self) -> None:
        """Reports resources and demands; the reply is the cluster view. A GCS silent for the
        node death timeout is gone (its socket may not say so): the node shuts down."""
        # Count unanswered beats rather than wall time: after this process was frozen
        # (SIGSTOP, a suspended VM) the clock jumps, yet the GCS may be fine.
        limit = max(2, int(config.node_death_timeout / (config.heartbeat_interval * 4)) + 1)
        unanswered = 0
        r = self.raylet
        while True:
            await self._until_next_beat()
            if self.gcs is None or self.gcs.closed:
                return
            conn = self.gcs.conn
            if not self.gcs.connected or conn is None:
                unanswered = 0  # the GCS is away: the link reconnects (or gives up)
                continue
            try:
                demands = r.leases.pending_demands()
                self.demand_reported = bool(demands)
                body = {
                    "node_id": r.node_id,
                    "available": r.resources.available_dict(),
                    "total": r.resources.total_dict(),
                    "pending_demands": demands,
                    "idle_for": r.leases.machine.idle_for(),
                    "store_stats": r.store.stats(),
                }
                # On this connection only: a beat is not worth sending to the next GCS.
                reply = await conn.call("heartbeat", body, timeout=config.heartbeat_interval * 4)
            except TimeoutError:
                unanswered += 1
                if unanswered >= limit:
                    logger.error(
                        "the GCS left %d heartbeats unanswered; the node shuts down", unanswered
                    )
                    os.kill(os.getpid(), signal.SIGTERM)
                    return
                continue
            except NodeDeclaredDead:
                await self.rejoin_as_new("the GCS declared this node dead")
                continue
            except conn_mod.ConnectionClosedError:
                continue  # the GCS went away: the link reconnects (or gives up)
            except Exception:
                # Anything else (a bug here or in the GCS's handler) must not end the beats:
                # a node whose heartbeat task died was declared dead ten seconds later with
                # nothing in its log to say why.
                logger.exception("a heartbeat to the GCS failed; the next goes as usual")
                continue
            unanswered = 0
            self.set_view(reply.get("view", []))

    def h_declared_dead(self, conn: Connection, body: dict) -> None:
        asyncio.ensure_future(self.rejoin_as_new(body.get("reason", "declared dead")))

    def h_node_dead(self, conn: Connection, body: dict) -> None:
        node_id = body["node_id"]
        self.raylet.view.remove(node_id)
        self.raylet.objects.drop_peer(node_id, "its node died")
        self.raylet.objects.owner_node_died(node_id)

    async def rejoin_as_new(self, reason: str) -> None:
        """The cluster gave up on this node (it was silent too long) and redid its work
        elsewhere: drop that work and join again under a new node id (Ray does the same)."""
        r = self.raylet
        if self._rejoining or r.stopping:
            return
        self._rejoining = True
        try:
            from ember.ids import new_unique_id

            old = r.node_id
            logger.warning("%s: rejoining as a new node (was %s)", reason, old.hex()[:12])
            r.node_id = new_unique_id()
            r.node["node_id"] = r.node_id
            r.pool.node["node_id"] = r.node_id
            r.leases.handle(ev.NodeDeclaredDead(r.node_id))
            # Its placement group bundles were placed again elsewhere.
            for pg_id in list(r.bundles):
                r.h_release_bundles(None, {"pg_id": pg_id})  # type: ignore[arg-type]
            reply = await self.gcs.call("register_node", self.registration(), timeout=30.0)
            self.set_view(reply.get("view", []))
            for _ in range(r.args.prestart):
                r.leases.start_worker()
        finally:
            self._rejoining = False
