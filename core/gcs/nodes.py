"""The GCS's node table: raylets register and heartbeat; a node that disconnects or stays
silent longer than the node death timeout is declared dead, and everyone who cares is told.

A dead node never comes back under its id: its raylet must rejoin with a new one, since the
work it held was already redone elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember import config
from ember.lifecycle import Lifecycle, LifecycleState, Track
from ember.protocol.connection import Connection
from ember.protocol.messages.gcs import NodeDeclaredDead

if TYPE_CHECKING:
    from ember.gcs.storage import Store

logger = logging.getLogger("ember.gcs")


class NodeState(LifecycleState):
    """Member names are the strings GCS replies carry."""

    ALIVE = "ALIVE"
    DEAD = "DEAD"


NODE_LIFECYCLE: Lifecycle[NodeState] = Lifecycle(
    "node", {NodeState.ALIVE: {"died": NodeState.DEAD}}
)


class Unconnected:
    """A node's connection while the GCS waits for its raylet to come back: a GCS started
    again reads the node back from storage, but the raylet's old connection died with the
    old process. Sends go nowhere; calls fail; the node is left out of placement."""

    closed = True
    close_reason = "the raylet has not reconnected since the GCS restarted"

    def __init__(self) -> None:
        self.state: dict = {}

    def send(self, op: Any, body: Any = None) -> None:
        pass

    async def call(self, op: Any, body: Any = None, timeout: float | None = None) -> Any:
        raise ConnectionError(self.close_reason)


class NodeInfo:
    def __init__(self, node_id: bytes, body: dict, conn: Any, now: float) -> None:
        self.node_id = node_id
        self.conn = conn
        self.address: str = body["address"]
        self.tcp_address: str = body.get("tcp_address") or ""
        self.data_address: str = body.get("data_address") or ""
        self.node_ip: str = body.get("node_ip", "127.0.0.1")
        self.total: dict[str, float] = body["resources"]
        self.available: dict[str, float] = dict(body["resources"])
        self.labels: dict[str, str] = body.get("labels", {})
        self.track: Track[NodeState] = NODE_LIFECYCLE.track(node_id.hex()[:12], NodeState.ALIVE)
        self.last_heartbeat = now  # on the node table's monotonic clock
        self.start_time = time.time()
        self.end_time: float | None = None
        self.info: dict = body
        self.pending_demands: list = []
        # When the node last reported its queue (wall time): the autoscaler holds launches
        # while a report predates the newest node's join (its queue may have moved there).
        self.demands_at: float | None = None
        # When a heartbeat last showed less of a resource free than the one before (wall
        # time): work landed here, perhaps spilled from a node whose queue report predates it.
        self.taken_at: float | None = None
        # Since when (wall time, this clock) the node has held no lease, by its own account;
        # None while it has work. The raylet reports a duration: clocks of hosts differ.
        self.idle_since: float | None = None
        self.death_reason = ""
        # Why no new work is placed here (``drain_node``), or None: it takes work.
        self.drain_reason: str | None = None

    @property
    def state(self) -> NodeState:
        return self.track.state

    @property
    def connected(self) -> bool:
        return not isinstance(self.conn, Unconnected)

    def record(self) -> bytes:
        """What storage keeps of it: its registration and its fate, not its heartbeats."""
        return pickle.dumps(
            {
                "body": self.info,
                "state": self.track.state.name,
                "start_time": self.start_time,
                "end_time": self.end_time,
                "death_reason": self.death_reason,
                "drain_reason": self.drain_reason,
            }
        )

    @classmethod
    def from_record(cls, node_id: bytes, data: bytes, now: float) -> NodeInfo:
        rec = pickle.loads(data)
        node = cls(node_id, rec["body"], Unconnected(), now)
        node.track = NODE_LIFECYCLE.track(node_id.hex()[:12], NodeState[rec["state"]])
        node.start_time = rec["start_time"]
        node.end_time = rec["end_time"]
        node.death_reason = rec["death_reason"]
        node.drain_reason = rec.get("drain_reason")
        if node.track.state is NodeState.DEAD:
            node.available = {}
        return node

    def public(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "address": self.address,
            "tcp_address": self.tcp_address,
            "data_address": self.data_address,
            "node_ip": self.node_ip,
            "state": self.track.state.name,
            "resources_total": self.total,
            "labels": self.labels,
            "resources_available": self.available,
            "death_reason": self.death_reason,
            "draining": self.drain_reason is not None,
            "drain_reason": self.drain_reason,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "session_dir": self.info.get("session_dir"),
            "arena_path": self.info.get("arena_path"),
            "object_store_memory": self.info.get("object_store_memory"),
            "hostname": self.info.get("hostname"),
            "is_head": self.info.get("is_head", False),
            "pending_demands": self.pending_demands,
            "demands_at": self.demands_at,
            "taken_at": self.taken_at,
            "idle_since": self.idle_since,
            "store_stats": self.info.get("store_stats", {}),
        }


def _nothing(*args: Any) -> None:
    pass


class NodeTable:
    """Membership and failure detection. What other parts do about a node joining, dying or
    freeing resources is wired in by the server through the ``on_*`` callbacks.

    ``connections`` is the server's set of open connections (the ones that asked for node
    events hear of joins and deaths); ``record(severity, message)`` logs a cluster event;
    ``clock`` is monotonic seconds (tests pass a fake one to drive the death timeout).
    """

    def __init__(
        self,
        connections: set[Connection],
        record: Callable[[str, str], None],
        death_timeout: float = config.node_death_timeout,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nodes: dict[bytes, NodeInfo] = {}  # {node_id: NodeInfo}, dead ones included
        self.connections = connections
        self.record = record
        self.death_timeout = death_timeout
        self.clock = clock
        # A node joined or its resources changed: waiting actors and groups may fit now.
        self.on_change: Callable[[], None] = _nothing
        # (node_id, reason): a node was declared dead.
        self.on_died: Callable[[bytes, str], None] = _nothing
        # (node, available before): a heartbeat brought new availability.
        self.on_heartbeat: Callable[[NodeInfo, dict[str, float]], None] = _nothing
        # New demand: a node's queue that was empty is not (the autoscaler's wait_demand);
        # actors and placement groups that park call it too.
        self.on_demand: Callable[[], None] = _nothing
        # (node, registration): a known node's raylet registered again after a GCS restart,
        # saying which actor leases and bundles it holds; what this GCS does not know of
        # (its grant's reply died with the old process) is ended.
        self.on_reregistered: Callable[[NodeInfo, dict], None] = _nothing
        self.store: Store | None = None  # where registrations and deaths are kept

    def _save(self, node: NodeInfo) -> None:
        if self.store is not None:
            self.store.mark("nodes", node.node_id, node.record)

    def restore(self, rows: dict[bytes, bytes]) -> None:
        """The nodes a previous GCS process knew. A live one waits, unconnected, for its
        raylet to register again; silent for the death timeout, it is declared dead."""
        now = self.clock()
        for node_id, data in rows.items():
            self.nodes[node_id] = NodeInfo.from_record(node_id, data, now)

    def alive(self) -> list[NodeInfo]:
        """The live nodes the GCS can talk to now (placement, news for raylets)."""
        return [n for n in self.nodes.values() if n.track.state is NodeState.ALIVE and n.connected]

    def placeable(self) -> list[NodeInfo]:
        """The live nodes new actors and bundles may go to: not draining."""
        return [n for n in self.alive() if n.drain_reason is None]

    def get_alive(self, node_id: bytes | None) -> NodeInfo | None:
        node = self.nodes.get(node_id) if node_id else None
        return node if node is not None and node.track.state is NodeState.ALIVE else None

    def h_register_node(self, conn: Connection, body: dict) -> dict:
        node_id = body["node_id"]
        old = self.nodes.get(node_id)
        if old is not None and old.track.state is NodeState.DEAD:
            raise NodeDeclaredDead(f"node {node_id.hex()} was declared dead; rejoin with a new id")
        node = NodeInfo(node_id, body, conn, self.clock())
        if old is not None:  # its raylet came back after a GCS restart: same node, same start
            node.start_time = old.start_time
            node.drain_reason = old.drain_reason
            logger.info("node %s reconnected", node_id.hex()[:12])
        self.nodes[node_id] = node
        self._save(node)
        conn.state["node_id"] = node_id
        conn.state["node_events"] = True
        if old is None:
            logger.info("node %s registered at %s", node_id.hex()[:12], node.address)
            self.record("INFO", f"node {node_id.hex()} joined at {node.node_ip}")
        else:
            self.record("INFO", f"node {node_id.hex()} reconnected after a GCS restart")
            self.on_reregistered(node, body)
        for c in list(self.connections):  # drivers subscribe to its workers' logs
            if not c.closed and c is not conn and c.state.get("node_events"):
                c.send("node_added", {"node_id": node_id, "tcp_address": node.tcp_address})
        self.on_change()
        return {"ok": True, "view": self.cluster_view()}

    def cluster_view(self) -> list[dict]:
        """What a raylet needs to spill work and pull objects: every live node's addresses
        and resources (as of its last heartbeat). A draining node shows no resources, so no
        raylet spills work to it; its objects are still reachable."""
        return [
            {
                "node_id": n.node_id,
                "tcp_address": n.tcp_address,
                "data_address": n.data_address,
                "node_ip": n.node_ip,
                "total": n.total if n.drain_reason is None else {},
                "available": n.available if n.drain_reason is None else {},
            }
            for n in self.nodes.values()
            if n.track.state is NodeState.ALIVE
        ]

    def h_heartbeat(self, conn: Connection, body: dict) -> dict:
        node = self.nodes.get(body["node_id"])
        if node is None or node.track.state is not NodeState.ALIVE:
            raise NodeDeclaredDead(f"node {body['node_id'].hex()} is not alive in the GCS")
        node.last_heartbeat = self.clock()
        before, node.available = node.available, body["available"]
        self.on_heartbeat(node, before)
        node.total = body.get("total", node.total)
        was_waiting, node.pending_demands = node.pending_demands, body.get("pending_demands", [])
        if node.pending_demands and not was_waiting:
            self.on_demand()
        node.demands_at = time.time()
        if any(v < before.get(k, 0.0) for k, v in node.available.items()):
            node.taken_at = node.demands_at
        idle_for = body.get("idle_for")
        node.idle_since = None if idle_for is None else node.demands_at - float(idle_for)
        if "store_stats" in body:
            node.info["store_stats"] = body["store_stats"]
        return {"view": self.cluster_view()}

    def h_subscribe_node_events(self, conn: Connection, body: Any) -> None:
        """A core worker wants ``node_added`` / ``node_dead`` (tools do not)."""
        conn.state["node_events"] = True

    async def h_set_resource(self, conn: Connection, body: dict) -> dict:
        node = self.nodes.get(body["node_id"])
        if node is None or node.track.state is not NodeState.ALIVE:
            raise ValueError(f"no live node {body['node_id'].hex()}")
        node.total, node.available = await node.conn.call("set_resource", body)
        self.on_change()
        return {"ok": True}

    async def h_drain_node(self, conn: Connection, body: dict) -> dict:
        node = self.get_alive(body["node_id"])
        if node is None:
            raise ValueError(f"no live node {body['node_id'].hex()}: only a live node drains")
        draining = body.get("draining", True)
        was = node.drain_reason
        node.drain_reason = (body.get("reason") or "drained") if draining else None
        if was != node.drain_reason:
            self._save(node)
            if (was is None) != (node.drain_reason is None):
                verb = "draining" if draining else "no longer draining"
                self.record("INFO", f"node {node.node_id.hex()} {verb}: {body.get('reason', '')}")
        reply = await node.conn.call("drain", {"draining": draining}, timeout=10.0)
        if not draining:
            self.on_change()  # waiting actors and groups may go there again
        return reply

    def h_unregister_node(self, conn: Connection, body: dict) -> None:
        node = self.nodes.get(body["node_id"])
        if node is not None and node.conn is conn:  # only a node's own raylet says it leaves
            self.node_died(node.node_id, body["reason"], told=True)

    def node_died(self, node_id: bytes, reason: str, told: bool = False) -> None:
        """``told``: the node's raylet said it was stopping (it needs no telling back)."""
        node = self.nodes.get(node_id)
        if node is None or node.track.state is NodeState.DEAD:
            return
        node.track.fire("died")
        node.end_time = time.time()
        node.available = {}
        node.death_reason = reason
        self._save(node)
        if node.drain_reason is not None:
            # Drained first (the autoscaler removing an idle node, an operator's drain): an
            # expected end, not an error every driver is told of.
            logger.info("node %s left after draining: %s", node_id.hex()[:12], reason)
            self.record(
                "INFO", f"node {node_id.hex()} left after draining ({node.drain_reason}): {reason}"
            )
        else:
            logger.warning("node %s died: %s", node_id.hex()[:12], reason)
            self.record("ERROR", f"node {node_id.hex()} died: {reason}")
        # Owners retry the tasks it ran and stop reading objects from it; raylets stop
        # spilling to it. Said to every connection: a silent node's sockets may stay open.
        for c in list(self.connections):
            if not c.closed and c is not node.conn and c.state.get("node_events"):
                c.send(
                    "node_dead",
                    {
                        "node_id": node_id,
                        "reason": reason,
                        "drained": node.drain_reason is not None,
                    },
                )
        if not told and not node.conn.closed:
            node.conn.send("declared_dead", {"reason": reason})
        self.on_died(node_id, reason)

    def check_heartbeats(self, stalled: float = 0.0) -> None:
        """Declares dead every live node silent for longer than the death timeout.

        ``stalled``: how long this GCS itself did not run since the last check (its monitor
        woke that much late: the machine was overloaded, the process stopped). Heartbeats
        sent meanwhile still wait unread in its sockets, and the monitor's timer may fire
        before they are read: that time is no node's silence, so it is not counted. Without
        this, a GCS frozen past the timeout declared every node dead on waking, and each
        rejoined under a new id while its workers and driver kept the old one."""
        now = self.clock()
        if stalled > 0:
            for node in self.nodes.values():
                if node.track.state is NodeState.ALIVE:
                    node.last_heartbeat = min(now, node.last_heartbeat + stalled)
        for node in list(self.nodes.values()):
            silent = now - node.last_heartbeat
            if node.track.state is NodeState.ALIVE and silent > self.death_timeout:
                why = "no heartbeat" if node.connected else "its raylet did not reconnect"
                self.node_died(
                    node.node_id,
                    f"{why} for {silent:.1f} s (node death timeout {self.death_timeout:g} s)",
                )

    async def monitor(self) -> None:
        interval = config.heartbeat_interval
        while True:
            slept_from = self.clock()
            await asyncio.sleep(interval)
            late = self.clock() - slept_from - interval
            # A timer late by a beat or less is ordinary scheduling; more, and this
            # process was not running (see ``check_heartbeats``).
            self.check_heartbeats(stalled=late if late > interval else 0.0)
