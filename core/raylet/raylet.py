"""The raylet: one per node. Local scheduler, worker pool, shared-memory object store host.

Messages it serves (framed transport, Unix socket for local processes, TCP for other nodes):
- from core workers: ``register_client``, ``request_lease`` / ``return_lease``,
  ``worker_blocked`` / ``worker_unblocked``, ``plasma_*`` (create, seal, get, release,
  delete), ``worker_title``, ``worker_exit_reason``;
- from the GCS: ``lease_actor_worker``, ``kill_worker``, ``reserve_bundles`` /
  ``release_bundles``, ``job_finished``;
- from tools: ``node_stats``, ``list_workers``, ``get_references``.

A lease is a worker plus the resources it holds while it runs one task at a time for its
holder. Lease requests wait in arrival order; one that no node can ever satisfy stays pending
and its holder is told once, naming the task and the shapes (as Ray does).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import logging
import os
import signal
import socket
import time
from typing import Any

from ember import config
from ember.object_store.store import ObjectStore
from ember.protocol import connection as conn_mod
from ember.protocol.connection import Connection
from ember.raylet.log_forwarder import LogForwarder
from ember.raylet.worker_pool import WorkerPool, WorkerProc
from ember.resources import NodeResources, apply_strategy, fmt, pg_resource_name
from ember.scheduling import NodeView, lease_decision

logger = logging.getLogger("ember.raylet")


class _Request:
    __slots__ = (
        "fut",
        "shape",
        "strategy",
        "client",
        "job_id",
        "name",
        "since",
        "warned",
        "actor_id",
        "spilled",
        "view_checked",
    )

    def __init__(
        self, fut, shape, strategy, client, job_id, name, actor_id=None, spilled=False
    ) -> None:
        self.fut: asyncio.Future = fut
        self.shape: dict[str, float] = shape
        self.strategy = strategy
        self.client: Connection | None = client
        self.job_id = job_id
        self.name = name
        self.since = time.monotonic()
        self.warned = False
        self.actor_id = actor_id
        self.spilled = spilled  # sent here by another raylet: run here, never spill again
        # False, "pending" or True: asked the GCS for a fresh view before failing it
        self.view_checked: bool | str = False


class _Lease:
    __slots__ = ("lease_id", "worker", "shape", "gpu_ids", "client", "released", "is_actor")

    def __init__(self, lease_id, worker, shape, gpu_ids, client, is_actor=False) -> None:
        self.lease_id = lease_id
        self.worker: WorkerProc = worker
        self.shape = shape
        self.gpu_ids = gpu_ids
        self.client = client
        self.released = False  # CPU handed back while the worker is blocked in get()
        self.is_actor = is_actor


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
        self.queue: list[_Request] = []
        self.leases: dict[int, _Lease] = {}  # {lease_id: _Lease}
        self._lease_ids = itertools.count(1)
        self.clients: dict[bytes, Connection] = {}  # {worker_id: connection} of all clients
        self.drivers: dict[bytes, Connection] = {}  # {worker_id: connection} of drivers
        self.bundles: dict[bytes, list] = {}  # {pg_id: [(index, shape)]} reserved here
        self.gcs: Connection | None = None
        self.seal_waiters: dict[bytes, list[asyncio.Future]] = {}
        self.cluster_view: list[dict] = []  # the other live nodes, from the GCS
        self.view_by_id: dict[bytes, dict] = {}
        self.spread_index = 0
        self.tcp_address = ""
        self.transfer: Any = None  # TransferServer of a cluster node
        self.pulls: dict[bytes, asyncio.Future] = {}  # {object_id: pull in progress}
        self.pull_slots = asyncio.Semaphore(config.max_concurrent_pulls)
        self.transfer_stats = {"active": 0, "peak": 0, "pulled": 0, "failed": 0, "bytes": 0}
        self.peer_raylets: dict[bytes, Connection] = {}  # {node_id: TCP connection}
        self._arena: Any = None
        self.logs = LogForwarder(self)
        self.stopping = False
        # Object copies pulled from other nodes, for the timeline: (seq, record), bounded;
        # the agent asks for those after the last seq it saw (node_stats).
        self.transfer_log: collections.deque = collections.deque(maxlen=1000)
        self.transfer_seq = 0
        # Why recent workers ended ({worker_id: reason}), for holders whose task's worker
        # died: the newest config.worker_exit_reasons_kept, older ones counted as forgotten.
        self.exit_reasons: collections.OrderedDict[bytes, str] = collections.OrderedDict()
        self.exit_reasons_forgotten = 0
        self.handlers = {
            "register_client": self.h_register_client,
            "request_lease": self.h_request_lease,
            "return_lease": self.h_return_lease,
            "worker_blocked": self.h_worker_blocked,
            "worker_unblocked": self.h_worker_unblocked,
            "worker_title": self.h_worker_title,
            "plasma_create": self.h_plasma_create,
            "plasma_seal": self.h_plasma_seal,
            "plasma_get": self.h_plasma_get,
            "plasma_release": self.h_plasma_release,
            "plasma_delete": self.h_plasma_delete,
            "plasma_abort": self.h_plasma_abort,
            "lease_actor_worker": self.h_lease_actor_worker,
            "return_actor_lease": self.h_return_actor_lease,
            "kill_worker": self.h_kill_worker,
            "worker_exit_reason": self.h_worker_exit_reason,
            "reserve_bundles": self.h_reserve_bundles,
            "release_bundles": self.h_release_bundles,
            "job_finished": self.h_job_finished,
            "node_stats": self.h_node_stats,
            "set_resource": self.h_set_resource,
            "list_workers": self.h_list_workers,
            "collect_references": self.h_collect_references,
            "pull_object": self.h_pull_object,
            "export_object": self.h_export_object,
            "unexport_object": self.h_unexport_object,
            "declared_dead": self.h_declared_dead,
            "node_dead": self.h_node_dead,
            "node_added": lambda c, b: None,
            "subscribe_logs": self.h_subscribe_logs,
            "shutdown": self.h_shutdown,
            "ping": lambda c, b: "pong",
        }

    # -- clients ---------------------------------------------------------------------------
    def h_register_client(self, conn: Connection, body: dict) -> dict:
        wid = body["worker_id"]
        conn.state["worker_id"] = wid
        self.clients[wid] = conn
        if body.get("is_driver"):
            conn.state["driver"] = True
            conn.state["job_id"] = body.get("job_id")
            self.drivers[wid] = conn
            if body.get("log_to_driver", True):
                self.logs.add_driver(conn, body.get("job_id"))
            return {"node_id": self.node_id}
        w = self.pool.workers.get(wid)
        if w is None:
            return {"node_id": self.node_id}  # a worker we did not start (tests)
        w.pid = body.get("pid", w.pid)
        w.conn = conn
        w.address = body["address"]
        w.log_paths = body.get("log_paths")
        if w.log_paths:
            self.logs.add_worker(w)
        self.pool.starting -= 1
        w.state = "IDLE"
        self.pool.idle.append(w)
        if not w.registered.done():
            w.registered.set_result(True)
        self.dispatch()
        return {"node_id": self.node_id}

    def on_connection_closed(self, conn: Connection) -> None:
        for oid in conn.state.pop("exports", ()):
            self.transfer.unexport(oid)
            self.store.release(oid, ("export", id(conn)))
        wid = conn.state.get("worker_id")
        if wid is None:
            self.logs.remove_driver(conn)
            self._client_gone(conn)  # another node's lease holder (spilled work)
            return
        self.clients.pop(wid, None)
        self.store.release_client(wid)
        if conn.state.get("driver"):
            self.drivers.pop(wid, None)
            self.logs.remove_driver(conn)
            self._client_gone(conn)
            return
        w = self.pool.workers.get(wid)
        if w is not None:
            # Reap soon: the process exits right after its socket closes.
            asyncio.get_running_loop().call_later(0.05, self.reap)
        self._client_gone(conn)

    def _client_gone(self, conn: Connection) -> None:
        """A lease holder died: its workers may be running its tasks; stop them."""
        for req in list(self.queue):
            if req.client is conn:
                self.queue.remove(req)
                if not req.fut.done():
                    req.fut.set_result(None)
        for lease in list(self.leases.values()):
            if lease.client is conn and not lease.is_actor:
                self._end_lease(lease, kill=True, reason="the process that leased it died")
        self.dispatch()

    # -- leases ----------------------------------------------------------------------------
    def h_request_lease(self, conn: Connection, body: dict) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        shape = apply_strategy(body["resources"], body.get("strategy"))
        req = _Request(
            fut,
            shape,
            body.get("strategy"),
            conn,
            body.get("job_id"),
            body.get("name", ""),
            spilled=body.get("spilled", False),
        )
        self.queue.append(req)
        self.dispatch()
        return fut

    def h_lease_actor_worker(self, conn: Connection, body: dict) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        shape = apply_strategy(body["resources"], body.get("strategy"))
        req = _Request(
            fut,
            shape,
            body.get("strategy"),
            None,
            body.get("job_id"),
            body.get("class_name", ""),
            actor_id=body["actor_id"],
        )
        self.queue.append(req)
        self.dispatch()
        return fut

    def dispatch(self) -> None:
        """Grants what fits, in order; starts workers for grants that wait only for one."""
        if self.stopping:
            return
        res = self.resources
        need_workers = 0
        i = 0
        while i < len(self.queue):
            req = self.queue[i]
            if req.fut.done():
                self.queue.pop(i)
                continue
            if req.actor_id is None:
                placed = self._place_here(req)
                if placed is False:  # answered: spilled elsewhere or failed
                    self.queue.pop(i)
                    continue
                if placed is None:  # held until a fresh cluster view arrives
                    i += 1
                    continue
            if not res.can_fit(req.shape):
                # In a cluster the view of other nodes lags a heartbeat: the reaper warns later.
                if not res.feasible(req.shape) and not self.tcp_address:
                    self._maybe_warn_infeasible(req)
                i += 1
                continue
            if not self.pool.idle:
                need_workers += 1
                i += 1
                continue
            self.queue.pop(i)
            w = self.pool.idle.pop()
            gpu_ids = res.acquire(req.shape)
            lease = _Lease(
                next(self._lease_ids), w, req.shape, gpu_ids, req.client, req.actor_id is not None
            )
            self.leases[lease.lease_id] = lease
            w.lease_id = lease.lease_id
            w.job_id = req.job_id
            if req.actor_id is not None:
                w.state = "ACTOR"
                w.actor_id = req.actor_id
                w.title = req.name
            else:
                w.state = "LEASED"
                w.title = req.name
            req.fut.set_result(
                {
                    "lease_id": lease.lease_id,
                    "worker_id": w.worker_id,
                    "address": w.address,
                    "gpu_ids": gpu_ids,
                    "pid": w.pid,
                    "node_id": self.node_id,
                }
            )
        to_start = need_workers - self.pool.starting
        for _ in range(max(0, to_start)):
            self.pool.start_worker()

    def _place_here(self, req: _Request) -> bool | None:
        """Decides whether a lease request waits here (True); else answers it with the node
        to ask instead (spillback) or an error (False), or holds it for a fresh view (None).
        Actor leases come from the GCS, already placed."""
        here = NodeView(self.node_id, self.resources.total_dict(), self.resources.available_dict())
        others = [NodeView(n["node_id"], n["total"], n["available"]) for n in self.cluster_view]
        kind, target = lease_decision(
            here, others, req.shape, req.strategy, spilled=req.spilled, spread=self.spread_index
        )
        if req.strategy == "SPREAD":
            self.spread_index += 1
        if kind in ("local", "infeasible"):
            return True
        if kind == "fail":
            if req.view_checked == "pending":
                return None  # the fresh view is on its way
            if not req.view_checked and self.gcs is not None and not self.gcs.closed:
                # The node may have joined since the last heartbeat: ask before failing.
                req.view_checked = "pending"
                asyncio.ensure_future(self.refresh_view())
                return None
            req.fut.set_result({"error": target})
            return False
        node = self.view_by_id[target.node_id]
        # Count it as taken until the next view, so one pass does not send everything to the
        # same node (as Ray does with its cluster resource view).
        for k, v in req.shape.items():
            if k in node["available"]:
                node["available"][k] -= v
        req.fut.set_result(
            {"spillback": {"node_id": target.node_id, "address": node["tcp_address"]}}
        )
        return False

    def _maybe_warn_infeasible(self, req: _Request) -> None:
        if req.warned:
            return
        if any(_fits_total(req.shape, n.get("total", {})) for n in self.cluster_view):
            return  # another node can run it
        req.warned = True
        what = f"actor {req.name}" if req.actor_id else f"task {req.name or '(unnamed)'}"
        message = (
            f"The {what} requires {fmt(req.shape)}, which no node in the cluster has "
            f"(this node has {fmt(self.resources.total_dict())}). It stays pending until a node "
            f"that can run it joins; to run it here, lower its resource requests."
        )
        logger.warning(message)
        targets = [req.client] if req.client is not None else list(self.drivers.values())
        for c in targets:
            if c is not None and not c.closed:
                c.send("warning", {"message": message, "kind": "infeasible"})

    def h_return_lease(self, conn: Connection, body: dict) -> None:
        lease = self.leases.get(body["lease_id"])
        if lease is None:
            return
        # A holder that saw the worker die (or retire after max_calls) must not get it back.
        died = body.get("worker_died", False)
        if died:
            # Usually the worker is already gone: learn how (exit code, signal) rather than
            # blaming our own kill, and kill it only if it is still there a moment later.
            self.reap()
            if self.leases.get(body["lease_id"]) is not lease:
                return  # reap() ended the lease of the dead worker
            self._end_lease(lease, True, "its holder lost it", grace=config.worker_death_grace)
            return
        self._end_lease(lease, kill=False, reason="")

    def h_return_actor_lease(self, conn: Connection, body: dict) -> None:
        lease = self.leases.get(body["lease_id"])
        if lease is not None:
            self._end_lease(lease, kill=body.get("kill", True), reason="actor lease returned")

    def _end_lease(self, lease: _Lease, kill: bool, reason: str, grace: float = 0.0) -> None:
        self.leases.pop(lease.lease_id, None)
        if not lease.released:
            self.resources.release(lease.shape, lease.gpu_ids)
        else:
            self.resources.release(
                {k: v for k, v in lease.shape.items() if k != "CPU"}, lease.gpu_ids
            )
        w = lease.worker
        w.lease_id = None
        w.blocked = False
        if kill or lease.is_actor:
            if grace:
                self._kill_later(w, reason or "its lease ended", grace)
            elif not w.dead:
                self.pool.kill(w, reason or "its lease ended")
        elif not w.dead and w.state in ("LEASED",):
            w.state = "IDLE"
            w.title = ""
            w.tasks_run += 1
            w.idle_since = time.monotonic()
            self.pool.idle.append(w)
        self.dispatch()

    def h_worker_blocked(self, conn: Connection, body: dict) -> None:
        w = self.pool.workers.get(body["worker_id"])
        if w is None or w.lease_id is None:
            return
        lease = self.leases.get(w.lease_id)
        if lease is None or lease.released or not lease.shape.get("CPU"):
            return
        lease.released = True
        w.blocked = True
        self.resources.release({"CPU": lease.shape["CPU"]})
        self.dispatch()

    def h_worker_unblocked(self, conn: Connection, body: dict) -> None:
        w = self.pool.workers.get(body["worker_id"])
        if w is None or w.lease_id is None:
            return
        lease = self.leases.get(w.lease_id)
        if lease is None or not lease.released:
            return
        lease.released = False
        w.blocked = False
        # Take the CPU back even if that oversubscribes for a moment (as Ray does).
        self.resources.acquire({"CPU": lease.shape["CPU"]})

    def h_worker_title(self, conn: Connection, body: dict) -> None:
        w = self.pool.workers.get(body["worker_id"])
        if w is not None:
            w.title = body["title"]

    def h_kill_worker(self, conn: Connection, body: dict) -> None:
        """Kills a worker now, or after ``grace`` seconds if it has not exited by then."""
        w = self.pool.workers.get(body["worker_id"])
        if w is None or w.dead:
            return
        reason = body.get("reason", "killed")
        grace = body.get("grace", 0)
        if not grace:
            self.pool.kill(w, reason)
            return
        w.kill_reason = reason
        self._kill_later(w, reason, grace)

    def _kill_later(self, w: WorkerProc, reason: str, grace: float) -> None:
        """Kills ``w`` after ``grace`` seconds unless it has exited by then."""

        def kill_if_alive() -> None:
            if not w.dead and w.proc.poll() is None:
                self.pool.kill(w, reason)

        asyncio.get_running_loop().call_later(grace, kill_if_alive)

    async def h_worker_exit_reason(self, conn: Connection, body: dict) -> str | None:
        """How a worker ended (exit code or signal), waiting up to
        config.worker_death_grace + 1 s for its exit to be seen; None if still unknown."""
        wid = body["worker_id"]
        deadline = time.monotonic() + config.worker_death_grace + 1.0
        while True:
            self.reap()
            reason = self.exit_reasons.get(wid)
            if reason is not None:
                return reason
            if wid not in self.pool.workers:
                if self.exit_reasons_forgotten:
                    return (
                        f"unknown: the raylet keeps the last {config.worker_exit_reasons_kept} "
                        f"worker exits and has forgotten {self.exit_reasons_forgotten}"
                    )
                return None
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.02)

    # -- worker deaths ---------------------------------------------------------------------
    def reap(self) -> None:
        for w in self.pool.reap():
            self.pool.forget(w)
            self.exit_reasons[w.worker_id] = w.exit_reason
            while len(self.exit_reasons) > config.worker_exit_reasons_kept:
                self.exit_reasons.popitem(last=False)
                self.exit_reasons_forgotten += 1
            if w.state == "STARTING":
                self.pool.starting -= 1
                logger.error("worker %s died while starting: %s", w.pid, w.exit_reason)
            lease = self.leases.get(w.lease_id) if w.lease_id else None
            if lease is not None:
                self.leases.pop(lease.lease_id, None)
                if lease.released:
                    shape = {k: v for k, v in lease.shape.items() if k != "CPU"}
                else:
                    shape = lease.shape
                self.resources.release(shape, lease.gpu_ids)
            if w.actor_id is not None and self.gcs is not None and not self.gcs.closed:
                self.gcs.send(
                    "worker_died",
                    {"worker_id": w.worker_id, "actor_id": w.actor_id, "reason": w.exit_reason},
                )
            self.logs.worker_exited(w)
            w.state = "DEAD"
        self.dispatch()

    async def reaper(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            self.reap()
            now = time.monotonic()
            for req in self.queue:
                patience = config.infeasible_warning_seconds
                if self.tcp_address:
                    patience += 2 * config.heartbeat_interval
                if not req.warned and now - req.since > patience:
                    if not self.resources.feasible(req.shape):
                        self._maybe_warn_infeasible(req)
            self._trim_idle()

    def _trim_idle(self) -> None:
        """Idle workers beyond the CPU count (left from blocked-get bursts) exit after a while,
        unless they still own objects someone uses: those would be lost with them."""
        keep = max(int(self.resources.total_dict().get("CPU", 1)), 1)
        if len(self.pool.idle) <= keep:
            return
        now = time.monotonic()
        for w in list(self.pool.idle[: len(self.pool.idle) - keep]):
            if now - w.idle_since > config.idle_worker_kill_seconds and w.conn is not None:
                self.pool.idle.remove(w)
                w.state = "CHECKING"
                asyncio.ensure_future(self._retire_if_unused(w))

    async def _retire_if_unused(self, w: WorkerProc) -> None:
        try:
            may_exit = await w.conn.call("may_exit", None, timeout=5.0)
        except Exception:
            may_exit = False
        if w.dead or w.state != "CHECKING":
            return
        if may_exit:
            self.pool.kill(w, "idle", signal.SIGTERM)
        else:
            w.state = "IDLE"
            w.idle_since = time.monotonic()
            self.pool.idle.append(w)
            self.dispatch()

    # -- plasma ----------------------------------------------------------------------------
    def h_plasma_create(self, conn: Connection, body: dict) -> int:
        oid = body["object_id"]
        if self.store.contains(oid):
            # A re-run of the task that made it (a retry, a rebuild): the new copy replaces
            # the old, which readers that pinned it keep until they let go.
            logger.info("object %s is written again; replacing the old copy", oid.hex()[:16])
            self.store.delete(oid)
        return self.store.create(
            body["object_id"], body["size"], body.get("client"), owner=body.get("owner")
        )

    def h_plasma_seal(self, conn: Connection, body: dict) -> None:
        oid = body["object_id"]
        self.store.seal(oid)
        for fut in self.seal_waiters.pop(oid, ()):
            if not fut.done():
                fut.set_result(None)

    async def h_plasma_get(self, conn: Connection, body: dict):
        return await self._get_sealed(body["object_id"], body["client"])

    async def _get_sealed(self, oid: bytes, client: Any) -> tuple[int, int] | None:
        """The object pinned for ``client``, waiting (30 s at most) for it to be sealed if it
        is being written: its writer's seal may trail the reply that made it known."""
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

    def h_plasma_release(self, conn: Connection, body: dict) -> None:
        self.store.release(body["object_id"], body["client"])

    def h_plasma_delete(self, conn: Connection, body: dict) -> None:
        for oid in body["object_ids"]:
            self.store.delete(oid)

    def h_plasma_abort(self, conn: Connection, body: dict) -> None:
        self.store.abort(body["object_id"])

    # -- placement groups ------------------------------------------------------------------
    def h_reserve_bundles(self, conn: Connection, body: dict) -> bool:
        pg_id, bundles = body["pg_id"], body["bundles"]
        res = self.resources
        total: dict[str, float] = {}
        for _, shape in bundles:
            for k, v in shape.items():
                total[k] = total.get(k, 0) + v
        if not res.can_fit(total):
            return False
        pg_hex = pg_id.hex()
        for index, shape in bundles:
            res.acquire(shape)
            for k, v in shape.items():
                res.add(pg_resource_name(k, pg_hex), v)
                res.add(pg_resource_name(k, pg_hex, index), v)
            res.add(pg_resource_name("bundle", pg_hex), 1)
            res.add(pg_resource_name("bundle", pg_hex, index), 1)
        self.bundles[pg_id] = bundles
        self.dispatch()
        return True

    def h_release_bundles(self, conn: Connection, body: dict) -> None:
        pg_id = body["pg_id"]
        bundles = self.bundles.pop(pg_id, None)
        if bundles is None:
            return
        pg_hex = pg_id.hex()
        res = self.resources
        # Workers still running in the group lose their room: stop them (Ray does too).
        for lease in list(self.leases.values()):
            if any(pg_hex in k for k in lease.shape):
                self._end_lease(lease, kill=True, reason="its placement group was removed")
        for index, shape in bundles:
            for k, v in shape.items():
                res.remove(pg_resource_name(k, pg_hex), v)
                res.remove(pg_resource_name(k, pg_hex, index), v)
            res.remove(pg_resource_name("bundle", pg_hex), 1)
            res.remove(pg_resource_name("bundle", pg_hex, index), 1)
            res.release(shape)
        self.dispatch()

    def h_job_finished(self, conn: Connection, body: dict) -> None:
        job_id = body["job_id"]
        for lease in list(self.leases.values()):
            if lease.worker.job_id == job_id and not lease.is_actor:
                self._end_lease(lease, kill=True, reason="its job finished")

    def h_set_resource(self, conn: Connection, body: dict) -> tuple[dict, dict]:
        name, capacity = body["name"], body["capacity"]
        current = self.resources.total_dict().get(name, 0.0)
        if capacity > current:
            self.resources.add(name, capacity - current)
        elif capacity < current:
            self.resources.remove(name, current - capacity)
        self.dispatch()
        return self.resources.total_dict(), self.resources.available_dict()

    # -- views -----------------------------------------------------------------------------
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
                    "to_node": self.node_id.hex(),
                    "size": size,
                    "start": start,
                    "end": end,
                },
            )
        )

    def h_node_stats(self, conn: Connection, body: Any) -> dict:
        after = (body or {}).get("transfers_after", 0) if isinstance(body, dict) else 0
        return {
            "transfers": [t for seq, t in self.transfer_log if seq > after],
            "transfers_seq": self.transfer_seq,
            "node_id": self.node_id,
            "pid": os.getpid(),  # the head's agent starts before the raylet: it learns it here
            "resources_total": self.resources.total_dict(),
            "resources_available": self.resources.available_dict(),
            "store": self.store.stats(),
            "num_workers": len(self.pool.workers),
            # The other nodes this raylet can place work on (from its last heartbeat's view).
            "view_node_ids": list(self.view_by_id),
            "transfer_stats": dict(self.transfer_stats, limit=config.max_concurrent_pulls),
            "pending_leases": [
                {
                    "shape": r.shape,
                    "name": r.name,
                    "since": r.since,
                    "infeasible": not self.resources.feasible(r.shape),
                }
                for r in self.queue
            ],
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
        return [w.public() for w in self.pool.workers.values()]

    def pending_demands(self) -> list[dict]:
        demands: dict[tuple, dict] = {}
        for r in self.queue:
            key = tuple(sorted(r.shape.items()))
            d = demands.setdefault(
                key,
                {"shape": r.shape, "count": 0, "infeasible": not self.resources.feasible(r.shape)},
            )
            d["count"] += 1
        return list(demands.values())

    # -- objects across nodes --------------------------------------------------------------
    @property
    def arena(self) -> Any:
        if self._arena is None:
            from ember.object_store.arena import Arena

            self._arena = Arena(self.args.arena_path, self.args.object_store_memory)
        return self._arena

    async def h_pull_object(self, conn: Connection, body: dict) -> dict:
        """A local client wants an object that lives on another node: copy it here (once,
        however many ask), then it reads it like any local object."""
        oid = body["object_id"]
        if self.store.contains(oid):
            return {"ok": True}
        pending = self.pulls.get(oid)
        if pending is None:
            pending = asyncio.ensure_future(self._pull(oid, body["node_id"], body.get("owner")))
            self.pulls[oid] = pending
            pending.add_done_callback(lambda _f, oid=oid: self.pulls.pop(oid, None))
        return await asyncio.shield(pending)

    async def _pull(self, oid: bytes, node_id: bytes, owner: Any) -> dict:

        node = self.view_by_id.get(node_id)
        if node is None and self.gcs is not None and not self.gcs.closed:
            # It may have joined since the last heartbeat: ask the GCS now.
            self.set_view(await self.gcs.call("get_cluster_view", None, timeout=10.0))
            node = self.view_by_id.get(node_id)
        if node is None:
            return {
                "ok": False,
                "node_gone": True,
                "reason": f"its node {node_id.hex()[:12]} is not alive",
            }
        async with self.pull_slots:  # bounded: a burst of gets cannot swamp the network
            if self.store.contains(oid):
                return {"ok": True}
            stats = self.transfer_stats
            stats["active"] += 1
            stats["peak"] = max(stats["peak"], stats["active"])
            try:
                reply = await self._pull_locked(oid, node_id, node, owner)
            finally:
                stats["active"] -= 1
            if reply.get("ok"):
                stats["pulled"] += 1
            else:
                stats["failed"] += 1
            return reply

    async def _pull_locked(self, oid: bytes, node_id: bytes, node: dict, owner: Any) -> dict:
        from ember.object_store.transfer import TransferError, pull_into

        try:
            peer = await self.peer_raylet(node_id)
            size = await peer.call("export_object", {"object_id": oid}, timeout=30.0)
        except Exception as e:
            return {"ok": False, "reason": f"its node {node_id.hex()[:12]} is unreachable: {e}"}
        if size is None:
            return {"ok": False, "reason": f"node {node_id.hex()[:12]} no longer holds it"}
        try:
            offset = self.store.create(oid, size, ("pull", oid), owner=owner, primary=False)
        except Exception as e:
            peer.send("unexport_object", {"object_id": oid})
            return {"ok": False, "reason": str(e), "error": e}
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
            return {
                "ok": False,
                "reason": f"the transfer from {node_id.hex()[:12]} failed: {e}",
            }
        finally:
            view.release()
            if not peer.closed:
                peer.send("unexport_object", {"object_id": oid})
        self.store.seal(oid)
        for fut in self.seal_waiters.pop(oid, ()):
            if not fut.done():
                fut.set_result(None)
        logger.info("pulled %s (%d bytes) from %s", oid.hex()[:16], size, node_id.hex()[:12])
        self.transfer_stats["bytes"] += size
        self.record_transfer(oid, node_id, size, started, time.time())  # for the timeline
        return {"ok": True}

    def h_subscribe_logs(self, conn: Connection, body: dict) -> None:
        """A driver on another node wants its job's worker output from this node too."""
        self.logs.add_driver(conn, body.get("job_id"))

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
        node = self.view_by_id[node_id]
        conn = await conn_mod.connect(
            node["tcp_address"], self.handlers, name=f"raylet:{node_id.hex()[:8]}"
        )
        self.peer_raylets[node_id] = conn
        return conn

    # -- GCS -------------------------------------------------------------------------------
    def registration(self) -> dict:
        return {
            "node_id": self.node_id,
            "address": self.args.address,
            "tcp_address": self.tcp_address,
            "data_address": self.transfer.address if self.transfer else "",
            "node_ip": self.args.node_ip,
            "resources": self.resources.total_dict(),
            "session_dir": self.session_dir,
            "arena_path": self.args.arena_path,
            "object_store_memory": self.args.object_store_memory,
            "hostname": socket.gethostname(),
            "is_head": self.args.head,
            "pid": os.getpid(),
        }

    async def connect_gcs(self) -> None:
        deadline = time.monotonic() + config.process_start_timeout
        while True:
            try:
                self.gcs = await conn_mod.connect(
                    self.args.gcs_address, self.handlers, name="gcs", on_close=self._gcs_closed
                )
                break
            except conn_mod.AuthenticationError:
                raise
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        reply = await self.gcs.call("register_node", self.registration(), timeout=30.0)
        self.set_view(reply.get("view", []))

    async def refresh_view(self) -> None:
        try:
            view = await self.gcs.call("get_cluster_view", None, timeout=10.0)
        except Exception as e:
            logger.warning("could not refresh the cluster view: %s", e)
            view = None
        for req in self.queue:
            if req.view_checked == "pending":
                req.view_checked = True
        if view is None:
            self.dispatch()  # decide with the view we have
        else:
            self.set_view(view)

    def set_view(self, view: list[dict]) -> None:
        others = [n for n in view if n["node_id"] != self.node_id]
        self.cluster_view = others
        self.view_by_id = {n["node_id"]: n for n in others}
        for node_id in list(self.peer_raylets):
            if node_id not in self.view_by_id:
                self.peer_raylets.pop(node_id).close("its node left the cluster")
        if self.queue:
            self.dispatch()

    def _gcs_closed(self, conn: Connection) -> None:
        if not self.stopping:
            logger.error("lost the GCS (%s); the node shuts down", conn.close_reason)
            os.kill(os.getpid(), signal.SIGTERM)

    async def heartbeat(self) -> None:
        """Reports resources and demands; the reply is the cluster view. A GCS silent for the
        node death timeout is gone (its socket may not say so): the node shuts down."""
        # Count unanswered beats rather than wall time: after this process was frozen
        # (SIGSTOP, a suspended VM) the clock jumps, yet the GCS may be fine.
        limit = max(2, int(config.node_death_timeout / (config.heartbeat_interval * 4)) + 1)
        unanswered = 0
        while True:
            await asyncio.sleep(config.heartbeat_interval)
            if self.gcs is None or self.gcs.closed:
                return
            body = {
                "node_id": self.node_id,
                "available": self.resources.available_dict(),
                "total": self.resources.total_dict(),
                "pending_demands": self.pending_demands(),
                "store_stats": self.store.stats(),
            }
            try:
                reply = await self.gcs.call(
                    "heartbeat", body, timeout=config.heartbeat_interval * 4
                )
            except TimeoutError:
                unanswered += 1
                if unanswered >= limit:
                    logger.error(
                        "the GCS left %d heartbeats unanswered; the node shuts down", unanswered
                    )
                    os.kill(os.getpid(), signal.SIGTERM)
                    return
                continue
            except Exception:
                return  # closed: _gcs_closed handles it
            unanswered = 0
            if reply.get("dead"):
                await self.rejoin_as_new("the GCS declared this node dead")
            else:
                self.set_view(reply.get("view", []))

    def h_declared_dead(self, conn: Connection, body: dict) -> None:
        asyncio.ensure_future(self.rejoin_as_new(body.get("reason", "declared dead")))

    def h_node_dead(self, conn: Connection, body: dict) -> None:
        node_id = body["node_id"]
        self.cluster_view = [n for n in self.cluster_view if n["node_id"] != node_id]
        self.view_by_id.pop(node_id, None)
        peer = self.peer_raylets.pop(node_id, None)
        if peer is not None:
            peer.close("its node died")

    async def rejoin_as_new(self, reason: str) -> None:
        """The cluster gave up on this node (it was silent too long) and redid its work
        elsewhere: drop that work and join again under a new node id (Ray does the same)."""
        if getattr(self, "_rejoining", False) or self.stopping:
            return
        self._rejoining = True
        try:
            from ember.ids import new_unique_id

            old = self.node_id
            logger.warning("%s: rejoining as a new node (was %s)", reason, old.hex()[:12])
            for lease in list(self.leases.values()):
                self._end_lease(lease, kill=True, reason="the node was declared dead")
            for w in list(self.pool.idle):
                self.pool.kill(w, "the node was declared dead")
            self.pool.idle.clear()
            self.node_id = new_unique_id()
            self.node["node_id"] = self.node_id
            self.pool.node["node_id"] = self.node_id
            reply = await self.gcs.call("register_node", self.registration(), timeout=30.0)
            self.set_view(reply.get("view", []))
            for _ in range(self.args.prestart):
                self.pool.start_worker()
        finally:
            self._rejoining = False

    def h_shutdown(self, conn: Connection, body: Any) -> dict:
        os.kill(os.getpid(), signal.SIGTERM)
        return {"ok": True}


def _fits_total(shape: dict[str, float], total: dict[str, float]) -> bool:
    return all(v <= 0 or total.get(k, 0) >= v for k, v in shape.items())


async def serve(args: argparse.Namespace) -> None:
    import json

    resources = json.loads(args.resources)
    raylet = Raylet(args, resources)
    from ember.object_store.arena import create_arena_file, remove_arena_file

    create_arena_file(args.arena_path, args.object_store_memory)
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
        tcp_server, raylet.tcp_address = await conn_mod.serve(
            f"tcp:{args.node_ip}:0",
            raylet.handlers,
            name="raylet-tcp",
            on_close=raylet.on_connection_closed,
        )
        servers.append(tcp_server)
        raylet.transfer = TransferServer(args.arena_path, args.node_ip, token)
    gcs_task = asyncio.ensure_future(raylet.connect_gcs())
    for _ in range(args.prestart):
        raylet.pool.start_worker()
    await gcs_task
    agent = None
    if args.agent:  # the node's agent: the raylet starts it, restarts it, and stops it
        from ember.raylet.child_supervisor import AgentSupervisor

        agent = AgentSupervisor(json.loads(args.agent), args.session_dir)
        agent.launch(config.process_start_timeout)
    dashboard = None
    if args.dashboard:  # the head's dashboard (and its agent): started again if it dies
        from ember.raylet.dashboard_supervisor import DashboardSupervisor

        dashboard = DashboardSupervisor(json.loads(args.dashboard), args.session_dir)
        dashboard.start()
    tasks = [
        asyncio.ensure_future(raylet.heartbeat()),
        asyncio.ensure_future(raylet.reaper()),
        asyncio.ensure_future(raylet.logs.run()),
    ]
    from ember.process_util import signal_ready

    signal_ready(args.ready_fd, args.address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    raylet.stopping = True
    if agent is not None:
        await agent.stop()
    if dashboard is not None:
        await dashboard.stop()
    for t in tasks:
        t.cancel()
    for srv in servers:
        srv.close()
    if raylet.transfer is not None:
        raylet.transfer.close()
    raylet.pool.stop_reading()  # stop_all reads the zygote's messages itself
    await loop.run_in_executor(None, raylet.pool.stop_all)
    await raylet.logs.final_flush()
    if raylet.gcs is not None:
        raylet.gcs.close("raylet stopping")
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
    parser.add_argument("--ready-fd", type=int, default=-1)
    parser.add_argument("--parent-pid", type=int, default=0)
    args = parser.parse_args(argv)
    from ember.process_util import die_with_parent, setup_process_logging

    setup_process_logging(os.path.join(args.session_dir, "logs", "raylet.log"))
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    loop = conn_mod.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(serve(args))


if __name__ == "__main__":
    main()
