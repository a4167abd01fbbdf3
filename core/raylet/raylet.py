"""The raylet: one per node. It runs the node's worker leases, hosts the shared-memory object
store, keeps the node in the cluster and forwards worker output to drivers. This module is the
process (``python -m ember.raylet.raylet``) and the client registry; the work is in:

- ``lease_manager`` / ``lease_machine``: worker leases (the I/O shell and its state machine);
- ``object_service``: the ``plasma_*`` messages and copies of objects between nodes;
- ``membership``: registration, heartbeats and the cluster view (``cluster_view``);
- ``worker_pool`` / ``zygote``: worker processes; ``log_forwarder``: their output;
- ``memory_monitor``: kills a worker before the node runs out of memory.

Messages it serves (framed transport, Unix socket for local processes, TCP for other nodes):
- from core workers: ``register_client``, ``request_lease`` / ``return_lease``,
  ``worker_blocked`` / ``worker_unblocked``, ``plasma_*`` (create, seal, get, release,
  delete), ``worker_title``, ``worker_exit_reason``;
- from the GCS: ``lease_actor_worker``, ``kill_worker``, ``reserve_bundles`` /
  ``release_bundles``, ``job_finished``, ``free_owned_objects`` (owners dead elsewhere);
- from tools: ``node_stats``, ``list_workers``, ``get_references``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
from typing import Any

from ember import config
from ember.object_store.store import ObjectStore
from ember.protocol import connection as conn_mod
from ember.protocol.connection import Connection
from ember.protocol.handler_table import handlers_from
from ember.protocol.messages.raylet import RAYLET
from ember.raylet import lease_events as ev
from ember.raylet.cluster_view import ClusterView
from ember.raylet.lease_manager import LeaseManager
from ember.raylet.log_forwarder import LogForwarder
from ember.raylet.membership import Membership
from ember.raylet.memory_monitor import MemoryMonitor
from ember.raylet.object_service import ObjectService
from ember.raylet.worker_pool import WorkerPool
from ember.resources import NodeResources, pg_resource_name


class Raylet:
    def __init__(self, args: argparse.Namespace, resources: dict[str, float]) -> None:
        self.args = args
        self.node_id = bytes.fromhex(args.node_id)
        self.session_dir = args.session_dir
        self.resources = NodeResources(resources)
        self.store = ObjectStore(args.object_store_memory)
        self.node: dict[str, Any] = {
            "node_id": self.node_id,
            "session_dir": args.session_dir,
            "raylet_address": args.address,
            "gcs_address": args.gcs_address,
            "arena_path": args.arena_path,
            "arena_capacity": args.object_store_memory,
            "node_ip": args.node_ip,
            "token_file": args.token_file,
        }
        self.pool = WorkerPool(self.node)
        self.view = ClusterView()
        self.clients: dict[bytes, Connection] = {}  # {worker_id: connection} of all clients
        self.drivers: dict[bytes, Connection] = {}  # {worker_id: connection} of drivers
        self.bundles: dict[bytes, list] = {}  # {pg_id: [(index, shape)]} reserved here
        self.tcp_address = ""
        self.logs = LogForwarder(self)
        self.stopping = False
        self.gcs_keeper: Any = None  # the head's GCS supervisor (gcs_supervisor), if any
        self.membership = Membership(self)
        self.memory = MemoryMonitor(self)  # before the leases: worker starts read its usage
        self.leases = LeaseManager(self)
        self.objects = ObjectService(self)
        # Every op of the catalogue, from the parts' h_<op> methods (checked at start-up).
        self.handlers = handlers_from(
            RAYLET,
            self,
            self.leases,
            self.objects,
            self.membership,
            extra={
                "node_added": lambda c, b: None,  # the heartbeat's view brings new nodes
                "ping": lambda c, b: "pong",
            },
        )

    @property
    def gcs(self) -> Connection | None:
        return self.membership.gcs

    def set_tcp_address(self, address: str) -> None:
        """This node listens on TCP too: it is part of a multi-node cluster."""
        self.tcp_address = address
        self.leases.machine.in_cluster = bool(address)

    # -- clients ---------------------------------------------------------------------------
    def h_register_client(self, conn: Connection, body: dict) -> dict:
        wid = body["worker_id"]
        conn.state["worker_id"] = wid
        self.clients[wid] = conn
        if body.get("is_driver"):
            conn.state["driver"] = True
            conn.state["job_id"] = body.get("job_id")
            conn.state["pid"] = body.get("pid")
            self.drivers[wid] = conn
            if body.get("log_to_driver", True):
                self.logs.add_driver(conn, body.get("job_id"))
            return {"node_id": self.node_id}
        w = self.pool.workers.get(wid)
        if w is not None:  # else a worker we did not start (tests)
            self.leases.worker_registered(w, conn, body)
        return {"node_id": self.node_id}

    def on_connection_closed(self, conn: Connection) -> None:
        self.objects.connection_closed(conn)
        wid = conn.state.get("worker_id")
        if wid is None:
            self.logs.remove_driver(conn)
            self.leases.client_gone(conn)  # another node's lease holder (spilled work)
            return
        self.clients.pop(wid, None)
        self.store.release_client(wid)
        self.objects.spiller.room_freed()
        if not self.stopping:
            # A driver or worker that is gone owns nothing any more: free what it owned here
            # and on every other node (its objects would hold the stores for good).
            self.objects.owners_died([wid], tell_cluster=True)
        if conn.state.get("driver"):
            self.drivers.pop(wid, None)
            self.logs.remove_driver(conn)
            self.leases.client_gone(conn)
            return
        if wid in self.pool.workers:
            # Reap soon: the process exits right after its socket closes.
            asyncio.get_running_loop().call_later(0.05, self.leases.reap)
        self.leases.client_gone(conn)

    def h_subscribe_logs(self, conn: Connection, body: dict) -> None:
        """A driver on another node wants its job's worker output from this node too."""
        self.logs.add_driver(conn, body.get("job_id"))

    # -- placement groups and resources ----------------------------------------------------
    def h_reserve_bundles(self, conn: Connection, body: dict) -> bool:
        """Reserves bundles of a group, adding to those it already has here (a group placing
        bundles it lost with another node). A bundle already here is not reserved twice:
        the request may come again from a GCS started after the first was answered."""
        pg_id = body["pg_id"]
        held = self.bundles.get(pg_id, [])
        have = {index for index, _ in held}
        bundles = [(index, shape) for index, shape in body["bundles"] if index not in have]
        res = self.resources
        total: dict[str, float] = {}
        for _, shape in bundles:
            for k, v in shape.items():
                total[k] = total.get(k, 0) + v
        if not res.can_fit(total):
            return False
        pg_hex = pg_id.hex()
        for index, shape in bundles:
            # The bundle's GPUs are its tasks' to use (CUDA_VISIBLE_DEVICES), and come back
            # to the node when the group goes.
            res.reserve_bundle_gpus(pg_hex, index, res.acquire(shape))
            for k, v in shape.items():
                res.add(pg_resource_name(k, pg_hex), v)
                res.add(pg_resource_name(k, pg_hex, index), v)
            res.add(pg_resource_name("bundle", pg_hex), 1)
            res.add(pg_resource_name("bundle", pg_hex, index), 1)
        self.bundles[pg_id] = held + bundles
        self.leases.handle(ev.ResourcesChanged())
        return True

    def h_release_bundles(self, conn: Connection, body: dict) -> None:
        """Releases a group's bundles here: those of ``indexes``, or all of them."""
        pg_id = body["pg_id"]
        held = self.bundles.pop(pg_id, None)
        if held is None:
            return
        indexes = body.get("indexes")
        if indexes is None:
            bundles = held
        else:
            bundles = [(i, shape) for i, shape in held if i in indexes]
            kept = [(i, shape) for i, shape in held if i not in indexes]
            if kept:
                self.bundles[pg_id] = kept
        pg_hex = pg_id.hex()
        res = self.resources
        # Workers still running in the released bundles lose their room: stop them (Ray
        # does too). Released one by one, only the leases that asked for those bundles.
        if indexes is None:
            self.leases.handle(ev.GroupRemoved(pg_hex))
        else:
            markers = frozenset(pg_resource_name("bundle", pg_hex, i) for i, _ in bundles)
            self.leases.handle(ev.GroupRemoved(pg_hex, markers))
        gpus = {index: res.bundle_gpus.get((pg_hex, index), []) for index, _ in bundles}
        if pg_id not in self.bundles:
            res.drop_group_gpus(pg_hex)
        else:
            for index in gpus:
                res.drop_bundle_gpus(pg_hex, index)
        for index, shape in bundles:
            for k, v in shape.items():
                res.remove(pg_resource_name(k, pg_hex), v)
                res.remove(pg_resource_name(k, pg_hex, index), v)
            res.remove(pg_resource_name("bundle", pg_hex), 1)
            res.remove(pg_resource_name("bundle", pg_hex, index), 1)
            res.release(shape, gpus[index])
        self.leases.handle(ev.ResourcesChanged())

    def bundle_report(self) -> dict[bytes, list[int]]:
        """The bundles reserved here, {pg_id: [index]}, for the GCS to check against what
        it knows when this node registers again (``Membership.registration``)."""
        return {pg_id: [index for index, _ in held] for pg_id, held in self.bundles.items()}

    def h_job_finished(self, conn: Connection, body: dict) -> None:
        self.leases.handle(ev.JobFinished(body["job_id"]))

    def h_drain(self, conn: Connection, body: dict) -> dict:
        machine = self.leases.machine
        machine.draining = bool(body["draining"])
        self.leases.handle(ev.ResourcesChanged())  # queued requests go elsewhere now
        return {
            "draining": machine.draining,
            "leases": len(machine.leases),
            "queued": len(machine.queue),
            "num_primary": int(self.store.stats().get("num_primary", 0)),
        }

    def h_set_resource(self, conn: Connection, body: dict) -> tuple[dict, dict]:
        name, capacity = body["name"], body["capacity"]
        current = self.resources.total_dict().get(name, 0.0)
        if capacity > current:
            self.resources.add(name, capacity - current)
        elif capacity < current:
            self.resources.remove(name, current - capacity)
        self.leases.handle(ev.ResourcesChanged())
        return self.resources.total_dict(), self.resources.available_dict()

    # -- views -----------------------------------------------------------------------------
    def h_node_stats(self, conn: Connection, body: Any) -> dict:
        body = body if isinstance(body, dict) else {}
        after = body.get("transfers_after", 0)
        objects = self.objects
        return {
            "transfers": [t for seq, t in objects.transfer_log if seq > after],
            "transfers_seq": objects.transfer_seq,
            "node_id": self.node_id,
            "pid": os.getpid(),  # the head's agent starts before the raylet: it learns it here
            # The head's GCS as of now (the raylet starts it again when it dies): the agent
            # labels that process gcs_server.
            "gcs_pid": self.gcs_keeper.pid if self.gcs_keeper is not None else None,
            "resources_total": self.resources.total_dict(),
            "resources_available": self.resources.available_dict(),
            "store": self.store.stats(),
            "num_workers": len(self.pool.workers),
            # The other nodes this raylet can place work on (from its last heartbeat's view).
            "view_node_ids": list(self.view.by_id),
            "transfer_stats": dict(objects.transfer_stats, limit=config.max_concurrent_pulls),
            "pending_leases": self.leases.pending_leases(),
            "recent_exits": list(self.leases.recent_exits),
            "owned_freed": dict(objects.owned_freed),  # objects of dead owners, freed here
            "spill": objects.spiller.stats(),  # where and how much it spills (store: totals)
            # The memory monitor's settings, last reading and kills (the agent makes events).
            "memory_monitor": self.memory.stats(body.get("oom_kills_after", 0)),
        }

    async def h_collect_references(self, conn: Connection, body: Any) -> dict:
        """Every local process's reference table, asked concurrently (``ember memory``)."""

        async def one(client: Connection) -> dict | None:
            try:
                return await client.call("get_references", None, timeout=5.0)
            except Exception:
                return None  # it exited meanwhile, or is stuck: the rest still answer

        clients = [c for c in self.clients.values() if not c.closed]
        replies = await asyncio.gather(*(one(c) for c in clients))
        return {
            "node_id": self.node_id.hex(),
            "node_ip": self.args.node_ip,
            "store": self.store.stats(),
            "store_objects": len(self.store.list_objects()),
            "processes": [r for r in replies if r is not None],
            "unanswered": sum(r is None for r in replies),
        }

    def h_list_workers(self, conn: Connection, body: Any) -> list[dict]:
        """The pool's workers, then the drivers connected here (``is_driver``)."""
        rows = [w.public() for w in self.pool.workers.values()]
        for wid, driver in self.drivers.items():
            job_id = driver.state.get("job_id")
            rows.append(
                {
                    "worker_id": wid.hex(),
                    "pid": driver.state.get("pid"),
                    "state": "DRIVER",
                    "job_id": job_id.hex() if job_id else None,
                    "is_driver": True,
                }
            )
        return rows

    def h_shutdown(self, conn: Connection, body: Any) -> dict:
        os.kill(os.getpid(), signal.SIGTERM)
        return {"ok": True}


async def serve(args: argparse.Namespace) -> None:
    import json

    resources = json.loads(args.resources)
    raylet = Raylet(args, resources)
    from ember.object_store.arena import create_arena_file, hold_arena_file, remove_arena_file

    create_arena_file(args.arena_path, args.object_store_memory)
    # Held until this process ends (the descriptor is never closed): a node starting takes an
    # arena no one holds, whose maker is gone, for a killed node's and removes it.
    try:
        hold_arena_file(args.arena_path)
    except OSError as e:  # a file system without locks: the process list still guards it
        logging.getLogger("ember.raylet").warning(
            "cannot lock the object store's file %s (%s): a node starting on this machine "
            "tells it from a killed node's by the processes it can see only",
            args.arena_path,
            e,
        )
    server, _ = await conn_mod.serve(
        args.address, raylet.handlers, name="raylet", on_close=raylet.on_connection_closed
    )
    servers = [server]
    if args.token_file:
        # A cluster node: other nodes' raylets and core workers reach us over TCP.
        from ember.cluster_token import read_token
        from ember.object_store.transfer import TransferServer

        token = read_token(args.token_file)
        conn_mod.set_cluster_token(token)
        tcp_server, tcp_address = await conn_mod.serve(
            f"tcp:{args.node_ip}:0",
            raylet.handlers,
            name="raylet-tcp",
            on_close=raylet.on_connection_closed,
        )
        raylet.set_tcp_address(tcp_address)
        servers.append(tcp_server)
        raylet.objects.transfer = TransferServer(args.arena_path, args.node_ip, token)
    gcs_task = asyncio.ensure_future(raylet.membership.connect_gcs())
    for _ in range(args.prestart):
        raylet.leases.start_worker()
    await gcs_task
    agent = None
    if args.agent:  # the node's agent: the raylet starts it, restarts it, and stops it
        from ember.raylet.child_supervisor import AgentSupervisor

        agent = AgentSupervisor(json.loads(args.agent), args.session_dir)
        agent.launch(config.process_start_timeout)
    gcs_keeper = None
    if args.gcs:  # the head's GCS: started again if it dies, on the same storage
        from ember.raylet.gcs_supervisor import GcsSupervisor

        gcs_keeper = GcsSupervisor(json.loads(args.gcs), args.session_dir)
        gcs_keeper.start()
        raylet.gcs_keeper = gcs_keeper
    dashboard = None
    if args.dashboard:  # the head's dashboard (and its agent): started again if it dies
        from ember.raylet.dashboard_supervisor import DashboardSupervisor

        dashboard = DashboardSupervisor(json.loads(args.dashboard), args.session_dir)
        dashboard.start()
    supervised = []
    for spec in args.supervise:  # the head's other processes (the autoscaler's monitor)
        from ember.raylet.child_supervisor import ModuleSupervisor

        keeper = ModuleSupervisor(json.loads(spec), args.session_dir)
        keeper.start()
        supervised.append(keeper)
    tasks = [
        asyncio.ensure_future(raylet.membership.heartbeat()),
        asyncio.ensure_future(raylet.leases.reaper()),
        asyncio.ensure_future(raylet.logs.run()),
    ]
    if raylet.memory.enabled:
        tasks.append(asyncio.ensure_future(raylet.memory.run()))
    else:
        logging.getLogger("ember.raylet").info(
            "memory monitor disabled (EMBER_MEMORY_MONITOR_REFRESH_MS=0)"
        )
    from ember.process_util import signal_ready

    signal_ready(args.ready_fd, args.address)
    stop = asyncio.Event()
    stopped_by: list[str] = []
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda s=sig: (stopped_by.append(s.name), stop.set()))
    await stop.wait()
    raylet.stopping = True
    if dashboard is not None:
        # The head's dashboard before anything else: the cluster stops with this node, and
        # its job manager, told that the supervisors of running jobs died with the node,
        # recorded those jobs FAILED when nothing had failed (their last status stays
        # RUNNING, and the history says the cluster stopped under them).
        await dashboard.stop()
    if raylet.gcs is not None and not raylet.gcs.closed:
        # First: the cluster stops sending work here, and owners redo what ran here, now
        # rather than once its workers and agent have stopped (a second or more).
        raylet.gcs.send(
            "unregister_node",
            {"node_id": raylet.node_id, "reason": f"its raylet was stopped ({stopped_by[0]})"},
        )
    if gcs_keeper is not None:  # a GCS stopped with the node is not started again
        gcs_keeper.stopping = True
    raylet.leases.handle(ev.ShuttingDown())
    if agent is not None:
        await agent.stop()
    for keeper in supervised:
        await keeper.stop()
    for t in tasks:
        t.cancel()
    for srv in servers:
        srv.close()
    if raylet.objects.transfer is not None:
        raylet.objects.transfer.close()
    raylet.pool.stop_reading()  # stop_all reads the zygote's messages itself
    await loop.run_in_executor(None, raylet.pool.stop_all)
    await raylet.logs.final_flush()
    if raylet.gcs is not None:
        raylet.gcs.close("raylet stopping")
    await loop.run_in_executor(None, raylet.objects.spiller.close)  # its files go too
    if gcs_keeper is not None:  # a GCS this raylet started: the node's last process
        await gcs_keeper.stop()
    remove_arena_file(args.arena_path)
    try:
        os.unlink(args.address[len("unix:") :])
    except OSError:
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ember-raylet")
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--session-dir", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--gcs-address", required=True)
    parser.add_argument("--resources", required=True, help="JSON resource totals")
    parser.add_argument("--labels", type=json.loads, default={}, help="JSON node labels")
    parser.add_argument("--object-store-memory", type=int, required=True)
    parser.add_argument("--arena-path", required=True)
    parser.add_argument("--node-ip", default="127.0.0.1")
    parser.add_argument("--prestart", type=int, default=0)
    parser.add_argument("--head", action="store_true")
    parser.add_argument("--token-file", default=None, help="the cluster token (cluster nodes)")
    parser.add_argument("--cluster-address", default=None, help="the GCS's TCP address")
    parser.add_argument("--agent", default="", help="JSON list: the node agent's arguments")
    parser.add_argument(
        "--dashboard",
        default="",
        help="JSON: how to start the head's dashboard again if it dies (dashboard_supervisor)",
    )
    parser.add_argument(
        "--spill-dir", default="", help="where objects spill (default: under the session dir)"
    )
    parser.add_argument(
        "--spill-max-bytes", type=int, default=None, help="cap on spill files (0: none)"
    )
    parser.add_argument(
        "--gcs",
        default="",
        help="JSON: how to start the head's GCS again if it dies (gcs_supervisor)",
    )
    parser.add_argument(
        "--supervise",
        action="append",
        default=[],
        help='JSON {"name", "argv": [module, args...]}: a process kept running (repeatable)',
    )
    parser.add_argument("--ready-fd", type=int, default=-1)
    parser.add_argument("--parent-pid", type=int, default=0)
    args = parser.parse_args(argv)
    from ember.process_util import die_with_parent, setup_process_logging

    setup_process_logging(os.path.join(args.session_dir, "logs", "raylet.log"))
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    from ember.core_worker.process_limits import raise_open_files_limit

    raise_open_files_limit(logging.getLogger("ember"), "raylet")
    loop = conn_mod.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(serve(args))


if __name__ == "__main__":
    main()
