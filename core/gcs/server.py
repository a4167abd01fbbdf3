"""The GCS: the cluster's metadata — nodes, jobs, actors, named actors, placement groups, KV.

One per cluster, on the head node. It stays off the per-task path: drivers and workers talk to
it to create, find and kill actors, and raylets register and heartbeat. Started as
``python -m ember.gcs.server`` (``ember stop`` finds it by that module name).

This module is the process: it builds the parts, wires what one part's news means to the
others, and serves their handlers. The parts:

- ``nodes.py``: the node table, membership and failure detection;
- ``jobs.py``: the job table;
- ``actors.py``: the actor manager, the I/O shell of ``actor_machine.py``'s lifecycle;
- ``placement_groups.py``: placement groups;
- ``kv.py`` and ``events.py``: the key-value store and the cluster event log;
- ``storage/``: where the tables are written so that they outlive this process. A GCS
  started again (by the head's raylet, ``raylet/gcs_supervisor.py``) reads them back, and
  the raylets, workers and drivers reconnect to it.

A request that changed a table is answered only once the change is durable
(``_ack_when_durable``); the changes of one loop turn are written together.

Runtime clients reach it on the framed transport (``protocol/connection.py``): actor creation
and placement groups are on the benchmark path, where a gRPC unary call (~450 µs measured)
would cost more than the work.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import os
import sys
import time
from typing import Any

from ember import config
from ember import runtime_env_packages as packages
from ember.gcs.actor_machine import ActorInfo, ActorState
from ember.gcs.actors import ActorManager
from ember.gcs.events import EventLog
from ember.gcs.jobs import JobTable
from ember.gcs.kv import DASHBOARD_URL_KEY, KvStore
from ember.gcs.nodes import NodeInfo, NodeState, NodeTable
from ember.gcs.placement_groups import PlacementGroupManager
from ember.gcs.storage import Store, default_url, open_backend
from ember.protocol import connection as conn_mod
from ember.protocol.connection import Connection
from ember.protocol.handler_table import handlers_from
from ember.protocol.messages.gcs import GCS
from ember.protocol.stream import Handler

logger = logging.getLogger("ember.gcs")

__all__ = [
    "ACTOR_STATES",
    "ActorInfo",
    "ActorState",
    "DASHBOARD_URL_KEY",
    "GcsServer",
    "NodeInfo",
    "NodeState",
    "main",
]

ACTOR_STATES = tuple(s.name for s in ActorState)


class GcsServer:
    """``store``: where the tables are written (None: nowhere, for tests of one process)."""

    def __init__(
        self,
        session_dir: str,
        node_death_timeout: float = config.node_death_timeout,
        store: Store | None = None,
    ) -> None:
        self.session_dir = session_dir
        self.store = store
        self.start_time = time.time()
        self.connections: set[Connection] = set()  # everyone to tell about node deaths
        self.log = EventLog()
        self.kv = KvStore()
        self.node_table = NodeTable(self.connections, self.log.record, node_death_timeout)
        self.jobs = JobTable()
        self.placement_groups = PlacementGroupManager(self.node_table, self.log.record)
        self.actors = ActorManager(
            self.node_table, self.jobs, self.log.record, placement_groups=self.placement_groups
        )
        self.node_table.on_change = self._capacity_changed
        self.node_table.on_died = self._node_died
        self.node_table.on_heartbeat = self._heartbeat
        self.node_table.on_reregistered = self._reregistered
        self.node_table.on_demand = self._demand_appeared
        # Bumped when new demand appears; wait_demand answers its waiters then.
        self.demand_version = 0
        self._demand_waiters: list[asyncio.Future] = []
        self.jobs.on_finished = self._job_finished
        for part in (self.node_table, self.jobs, self.actors, self.kv, self.placement_groups):
            part.store = store
        # Every op of the catalogue, from the parts' h_<op> methods (checked at start-up).
        handlers = handlers_from(
            GCS,
            self,
            self.node_table,
            self.jobs,
            self.actors,
            self.kv,
            self.placement_groups,
            self.log,
            extra={
                "get_cluster_view": lambda c, b: self.node_table.cluster_view(),
                "ping": lambda c, b: "pong",
            },
        )
        self.handlers = (
            handlers if store is None else {op: self._durable(h) for op, h in handlers.items()}
        )

    # -- storage ---------------------------------------------------------------------------
    def _durable(self, handler: Handler) -> Handler:
        """``handler``, answering only once what it changed is written (see storage/)."""
        store = self.store
        assert store is not None

        def durable(conn: Connection, body: Any) -> Any:
            result = handler(conn, body)
            if inspect.isawaitable(result):
                return self._ack_when_durable(result)
            if store.pending:
                # Taken now: the batch may be written before the reply's task first runs.
                return self._reply_after(result, store.durable())
            return result

        return durable

    async def _ack_when_durable(self, result: Any) -> Any:
        result = await result
        await self.store.durable()
        return result

    @staticmethod
    async def _reply_after(result: Any, durable: Any) -> Any:
        await durable
        return result

    def restore(self, tables: dict[str, dict[bytes, bytes]]) -> None:
        """The tables a previous GCS process wrote: this one carries on from them."""
        # The cluster table (the token) is the GCS process's, settled before it serves
        # (gcs/cluster_record.py), not a part's.
        tables = {name: rows for name, rows in tables.items() if name != "cluster"}
        if not any(tables.values()):
            return
        self.node_table.restore(tables["nodes"])
        self.jobs.restore(tables["jobs"])
        self.kv.restore(tables["kv"])
        self.placement_groups.restore(tables["placement_groups"])
        self.actors.restore(tables["actors"])
        counts = ", ".join(f"{len(rows)} {name}" for name, rows in tables.items())
        logger.info("read back from %s: %s", self.store.backend.description, counts)
        self.log.record("WARNING", f"the GCS restarted and read back its tables ({counts})")
        # A restored job whose driver does not register again within the reconnect timeout
        # died meanwhile; one that does carries on (a GCS restart never ends a job).
        timeout = config.gcs_reconnect_timeout
        asyncio.get_running_loop().call_later(timeout, self.jobs.expire_unclaimed, timeout)

    # -- what one part's news means to the others ------------------------------------------
    def _capacity_changed(self) -> None:
        """A node joined or its resources were changed: waiting work may fit now."""
        self.actors.schedule_pending()
        self.placement_groups.on_node_change()

    def _heartbeat(self, node: NodeInfo, before: dict[str, float]) -> None:
        """Resources came free on a node (tasks ended, leases went back): actors and
        placement groups waiting for room may fit now. A group whose reservation the raylet
        refused (its view was ahead of the raylet's) would otherwise wait for the next node
        to join or die."""
        self.actors.on_heartbeat(node, before)
        if any(v > before.get(k, 0.0) for k, v in node.available.items()):
            self.placement_groups.on_node_change()

    def _reregistered(self, node: NodeInfo, body: dict) -> None:
        """A node's raylet is back after a GCS restart: what it holds for a GCS that this
        one does not know of was granted to the old process, whose reply died with it."""
        self.actors.reconcile_leases(node, body.get("actor_leases") or [])
        self.placement_groups.reconcile_bundles(node, body.get("bundles") or {})

    def _node_died(self, node_id: bytes, reason: str) -> None:
        # Its groups' bundles first: an actor restarting out of a lost bundle then waits
        # for the bundle's new place (its resources come with that node's next heartbeat).
        self.placement_groups.on_node_died(node_id)
        self.actors.on_node_died(node_id, reason)
        self.placement_groups.on_node_change()

    def _job_finished(self, job_id: bytes, reason: str) -> None:
        # Non-detached actors and placement groups share their job's fate.
        self.actors.on_job_finished(job_id, reason)
        self.placement_groups.on_job_finished(job_id)
        for node in self.node_table.alive():
            node.conn.send("job_finished", {"job_id": job_id})

    def h_owners_died(self, conn: Connection, body: dict) -> None:
        """A raylet's clients died: the objects they owned have copies on other nodes too
        (results of tasks they ran there, copies pulled there), which only those raylets
        can free."""
        body = {"owner_ids": body["worker_ids"]}
        for node in self.node_table.alive():
            if node.conn is not conn and not node.conn.closed:
                node.conn.send("free_owned_objects", body)

    # -- connections -----------------------------------------------------------------------
    def on_connect(self, conn: Connection) -> None:
        self.connections.add(conn)

    def on_connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        node_id = conn.state.get("node_id")
        if node_id is not None:
            self.node_table.node_died(node_id, "its raylet disconnected")
        job_id = conn.state.get("job_id")
        if job_id is not None:
            self.jobs.finish(job_id, "the driver disconnected")
        self.actors.forget_connection(conn)

    async def monitor_nodes(self) -> None:
        await self.node_table.monitor()

    # -- views -----------------------------------------------------------------------------
    def h_list_nodes(self, conn: Connection, body: Any) -> list[dict]:
        return [n.public() for n in self.node_table.nodes.values()]

    async def h_get_package_chunk(self, conn: Connection, body: Any) -> dict:
        # A thread reads it: a chunk of a cold file must not hold up heartbeats.
        return await asyncio.to_thread(
            packages.read_chunk, self.session_dir, body["name"], int(body["offset"])
        )

    async def h_put_package_chunk(self, conn: Connection, body: Any) -> dict:
        return await asyncio.to_thread(
            packages.write_chunk,
            self.session_dir,
            body["name"],
            int(body["offset"]),
            body["data"],
            bool(body.get("last")),
        )

    def h_cluster_info(self, conn: Connection, body: Any) -> dict:
        return {
            "nodes": [n.public() for n in self.node_table.nodes.values()],
            "start_time": self.start_time,
            # How often nodes report (their queues among it): how stale a report may be.
            "heartbeat_interval": config.heartbeat_interval,
            "pending_actors": self.actors.pending_view(),
            "placement_groups": self.placement_groups.h_list_placement_groups(conn, None),
            # Put there by whoever starts the dashboard (dashboard/launch.py, from LocalNode.start).
            "dashboard_url": (self.kv.get(DASHBOARD_URL_KEY) or b"").decode(),
            "demand_version": self.demand_version,
        }

    def _demand_appeared(self) -> None:
        self.demand_version += 1
        waiters, self._demand_waiters = self._demand_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def h_wait_demand(self, conn: Connection, body: dict) -> dict:
        if body["seen"] == self.demand_version:
            fut = asyncio.get_running_loop().create_future()
            self._demand_waiters.append(fut)
            try:
                await asyncio.wait_for(fut, min(10.0, max(0.0, float(body["timeout"]))))
            except TimeoutError:
                pass
            finally:
                if fut in self._demand_waiters:
                    self._demand_waiters.remove(fut)
        return {"demand_version": self.demand_version}


async def serve(args: argparse.Namespace) -> None:
    storage = args.storage or default_url(args.session_dir)
    store = Store(open_backend(storage, args.storage_namespace))
    gcs = GcsServer(args.session_dir, args.node_death_timeout, store)
    try:
        tables = await store.load()
    except Exception as e:  # Redis down or unreachable, a SQLite file that is not one...
        raise SystemExit(
            f"the GCS could not read its tables from {store.backend.description}: {e}"
        ) from None
    try:
        gcs.restore(tables)
    except Exception as e:  # written by another version of Ember, or damaged
        raise SystemExit(
            f"the GCS could not read back the tables in {store.backend.description} "
            f"({type(e).__name__}: {e}): were they written by another version of Ember? "
            "Start the head on a new namespace (EMBER_GCS_STORAGE_NAMESPACE) or storage."
        ) from None
    if args.token_file:
        from ember.cluster_token import read_token
        from ember.gcs.cluster_record import settle_token

        token = read_token(args.token_file)
        token = await settle_token(store, tables, token, args.token_file, args.keep_stored_token)
        conn_mod.set_cluster_token(token)
    servers = []
    server, _ = await conn_mod.serve(
        args.address,
        gcs.handlers,
        name="gcs",
        on_connect=gcs.on_connect,
        on_close=gcs.on_connection_closed,
    )
    servers.append(server)
    tcp_address = None
    if args.tcp:
        server, tcp_address = await conn_mod.serve(
            args.tcp,
            gcs.handlers,
            name="gcs-tcp",
            on_connect=gcs.on_connect,
            on_close=gcs.on_connection_closed,
        )
        servers.append(server)
    asyncio.ensure_future(gcs.monitor_nodes())
    from ember.process_util import signal_ready

    signal_ready(args.ready_fd, tcp_address or args.address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for s in servers:
        s.close()
    await asyncio.wait_for(store.close(), 10.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ember-gcs")
    parser.add_argument("--session-dir", required=True)
    parser.add_argument("--address", required=True, help="unix:/path")
    parser.add_argument("--tcp", default=None, help="tcp:host:port for other nodes")
    parser.add_argument("--token-file", default=None)
    parser.add_argument(
        "--keep-stored-token",
        action="store_true",
        help="the node made the token in --token-file: a token the storage holds wins",
    )
    parser.add_argument("--node-death-timeout", type=float, default=config.node_death_timeout)
    parser.add_argument(
        "--storage",
        default="",
        help="where the tables are kept: sqlite:PATH (default: in the session directory), "
        "redis://HOST:PORT or memory:",
    )
    parser.add_argument("--storage-namespace", default=config.gcs_storage_namespace)
    parser.add_argument("--ready-fd", type=int, default=-1)
    parser.add_argument("--parent-pid", type=int, default=0)
    args = parser.parse_args(argv)
    from ember.process_util import die_with_parent, setup_process_logging

    setup_process_logging(os.path.join(args.session_dir, "logs", "gcs_server.log"))
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    from ember.core_worker.process_limits import raise_open_files_limit

    raise_open_files_limit(logging.getLogger("ember"), "GCS")
    loop = conn_mod.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(serve(args))
    finally:
        sys.stdout.flush()


if __name__ == "__main__":
    main()
