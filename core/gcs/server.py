"""The GCS: the cluster's metadata — nodes, jobs, actors, named actors, placement groups, KV.

One per cluster, on the head node. It stays off the per-task path: drivers and workers talk to
it to create, find and kill actors, and raylets register and heartbeat. It places actors
(asking a raylet for a dedicated worker, then sending the constructor to that worker),
restarts them after a crash while ``max_restarts`` allows, and tells every subscriber of an
actor when its state changes.

Runtime clients reach it on the framed transport (``protocol/connection.py``): actor creation
and placement groups are on the benchmark path, where a gRPC unary call's ~450 µs would cost
more than the work (BRIEF §3's measurements).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ember import config
from ember.gcs.placement_groups import PlacementGroupManager
from ember.options import ANONYMOUS_NAMESPACE_PREFIX
from ember.protocol import connection as conn_mod
from ember.protocol.connection import Connection
from ember.resources import fits

logger = logging.getLogger("ember.gcs")

DASHBOARD_URL_KEY = (
    "dashboard",
    b"url",
)  # written by the dashboard server  # (namespace, key) in the KV
ACTOR_STATES = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD")


class ActorInfo:
    def __init__(self, spec: Any) -> None:
        opts = spec.actor_options or {}
        self.spec = spec
        self.actor_id: bytes = spec.actor_id
        self.class_name: str = opts.get("class_name", "")
        self.name: str = opts.get("name", "")
        self.namespace: str = opts.get("namespace", "")
        self.detached: bool = opts.get("detached", False)
        self.max_restarts: int = opts.get("max_restarts", 0)
        self.owner = spec.owner  # (worker_id, address, node_id)
        self.job_id: bytes = spec.job_id
        self.state = "PENDING_CREATION"
        self.address: str | None = None
        self.worker_id: bytes | None = None
        self.node_id: bytes | None = None
        self.pid: int | None = None
        self.num_restarts = 0
        self.death_cause = ""
        self.pending_reason = ""
        self.start_time = time.time()
        self.end_time: float | None = None
        self.lease_id: Any = None
        self.no_restart = False

    def public(self) -> dict[str, Any]:
        return {
            "actor_id": self.actor_id,
            "class_name": self.class_name,
            "name": self.name,
            "namespace": self.namespace,
            "state": self.state,
            "address": self.address,
            "worker_id": self.worker_id,
            "node_id": self.node_id,
            "pid": self.pid,
            "num_restarts": self.num_restarts,
            "death_cause": self.death_cause,
            "pending_reason": self.pending_reason,
            "job_id": self.job_id,
            "detached": self.detached,
            "resources": self.spec.resources,
            "owner_worker_id": self.owner[0] if self.owner else None,
            "parent_task_id": self.spec.parent_task_id,
            "start_time": self.start_time,
            "end_time": self.end_time,
        }


class NodeInfo:
    def __init__(self, node_id: bytes, body: dict, conn: Connection) -> None:
        self.node_id = node_id
        self.conn = conn
        self.address: str = body["address"]
        self.tcp_address: str = body.get("tcp_address") or ""
        self.data_address: str = body.get("data_address") or ""
        self.node_ip: str = body.get("node_ip", "127.0.0.1")
        self.total: dict[str, float] = body["resources"]
        self.available: dict[str, float] = dict(body["resources"])
        self.labels: dict[str, str] = body.get("labels", {})
        self.state = "ALIVE"
        self.last_heartbeat = time.monotonic()
        self.start_time = time.time()
        self.end_time: float | None = None
        self.info: dict = body
        self.pending_demands: list = []
        self.death_reason = ""

    def public(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "address": self.address,
            "tcp_address": self.tcp_address,
            "data_address": self.data_address,
            "node_ip": self.node_ip,
            "state": self.state,
            "resources_total": self.total,
            "resources_available": self.available,
            "death_reason": self.death_reason,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "session_dir": self.info.get("session_dir"),
            "arena_path": self.info.get("arena_path"),
            "object_store_memory": self.info.get("object_store_memory"),
            "hostname": self.info.get("hostname"),
            "is_head": self.info.get("is_head", False),
            "pending_demands": self.pending_demands,
            "store_stats": self.info.get("store_stats", {}),
        }


class GcsServer:
    def __init__(self, session_dir: str) -> None:
        self.session_dir = session_dir
        self.nodes: dict[bytes, NodeInfo] = {}  # {node_id: NodeInfo}
        self.jobs: dict[bytes, dict] = {}  # {job_id: job info}
        self.actors: dict[bytes, ActorInfo] = {}  # {actor_id: ActorInfo}
        self.named: dict[tuple[str, str], bytes] = {}  # {(namespace, name): actor_id}
        self.kv: dict[tuple[str, bytes], bytes] = {}  # {(namespace, key): value}
        self.subscribers: dict[bytes, set[Connection]] = {}  # {actor_id: connections}
        self.worker_conns: dict[bytes, Connection] = {}  # {worker_id: connection we opened}
        self.pending_actors: list[bytes] = []  # waiting for a node with resources
        self.placement_groups = PlacementGroupManager(self)
        self.events: list[dict] = []  # cluster events (node and actor deaths), bounded
        self.start_time = time.time()
        self.node_death_timeout = config.node_death_timeout
        self.connections: set[Connection] = set()  # everyone to tell about node deaths
        self.handlers = {
            "register_node": self.h_register_node,
            "heartbeat": self.h_heartbeat,
            "register_job": self.h_register_job,
            "job_finished": self.h_job_finished,
            "create_actor": self.h_create_actor,
            "subscribe_actor": self.h_subscribe_actor,
            "unsubscribe_actor": self.h_unsubscribe_actor,
            "get_actor_info": self.h_get_actor_info,
            "get_named_actor": self.h_get_named_actor,
            "list_named_actors": self.h_list_named_actors,
            "kill_actor": self.h_kill_actor,
            "actor_exited": self.h_actor_exited,
            "worker_died": self.h_worker_died,
            "list_nodes": self.h_list_nodes,
            "list_actors": self.h_list_actors,
            "list_jobs": self.h_list_jobs,
            "cluster_info": self.h_cluster_info,
            "kv_put": self.h_kv_put,
            "kv_get": self.h_kv_get,
            "kv_del": self.h_kv_del,
            "kv_keys": self.h_kv_keys,
            "create_placement_group": self.placement_groups.h_create,
            "remove_placement_group": self.placement_groups.h_remove,
            "wait_placement_group": self.placement_groups.h_wait,
            "get_placement_group": self.placement_groups.h_get,
            "list_placement_groups": self.placement_groups.h_list,
            "get_events": self.h_get_events,
            "set_resource": self.h_set_resource,
            "get_cluster_view": lambda c, b: self.cluster_view(),
            "subscribe_node_events": self.h_subscribe_node_events,
            "ping": lambda c, b: "pong",
        }

    # -- nodes -----------------------------------------------------------------------------
    def h_register_node(self, conn: Connection, body: dict) -> dict:
        node_id = body["node_id"]
        old = self.nodes.get(node_id)
        if old is not None and old.state == "DEAD":
            # A node declared dead comes back under a new id (its old work was redone).
            raise ValueError(f"node {node_id.hex()} was declared dead; rejoin with a new id")
        node = NodeInfo(node_id, body, conn)
        self.nodes[node_id] = node
        conn.state["node_id"] = node_id
        conn.state["node_events"] = True
        logger.info("node %s registered at %s", node_id.hex()[:12], node.address)
        for c in list(self.connections):  # drivers subscribe to its workers' logs
            if not c.closed and c is not conn and c.state.get("node_events"):
                c.send("node_added", {"node_id": node_id, "tcp_address": node.tcp_address})
        self._event("INFO", f"node {node_id.hex()} joined at {node.node_ip}")
        self._schedule_pending_actors()
        self.placement_groups.on_node_change()
        return {"ok": True, "view": self.cluster_view()}

    def cluster_view(self) -> list[dict]:
        """What a raylet needs to spill work and pull objects: every live node's addresses
        and resources (as of its last heartbeat)."""
        return [
            {
                "node_id": n.node_id,
                "tcp_address": n.tcp_address,
                "data_address": n.data_address,
                "node_ip": n.node_ip,
                "total": n.total,
                "available": n.available,
            }
            for n in self.nodes.values()
            if n.state == "ALIVE"
        ]

    def h_heartbeat(self, conn: Connection, body: dict) -> dict:
        node = self.nodes.get(body["node_id"])
        if node is None or node.state != "ALIVE":
            return {"dead": True}
        self._heartbeat(node, body)
        return {"view": self.cluster_view()}

    def _heartbeat(self, node: NodeInfo, body: dict) -> None:
        node.last_heartbeat = time.monotonic()
        before, node.available = node.available, body["available"]
        # Resources came free (tasks ended, leases went back): an actor waiting for them may
        # fit now. Without this it waited for the next node join or worker death.
        if self.pending_actors and any(v > before.get(k, 0.0) for k, v in node.available.items()):
            self._schedule_pending_actors()
        node.total = body.get("total", node.total)
        node.pending_demands = body.get("pending_demands", [])
        if "store_stats" in body:
            node.info["store_stats"] = body["store_stats"]

    def h_subscribe_node_events(self, conn: Connection, body: Any) -> None:
        """A core worker wants ``node_added`` / ``node_dead`` (tools do not)."""
        conn.state["node_events"] = True

    def on_connect(self, conn: Connection) -> None:
        self.connections.add(conn)

    def on_connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        node_id = conn.state.get("node_id")
        if node_id is not None:
            self._node_died(node_id, "its raylet disconnected")
        job_id = conn.state.get("job_id")
        if job_id is not None:
            self._finish_job(job_id, "the driver disconnected")
        for subs in self.subscribers.values():
            subs.discard(conn)

    def _node_died(self, node_id: bytes, reason: str) -> None:
        node = self.nodes.get(node_id)
        if node is None or node.state == "DEAD":
            return
        node.state = "DEAD"
        node.end_time = time.time()
        node.available = {}
        node.death_reason = reason
        logger.warning("node %s died: %s", node_id.hex()[:12], reason)
        self._event("ERROR", f"node {node_id.hex()} died: {reason}")
        # Owners retry the tasks it ran and stop reading objects from it; raylets stop
        # spilling to it. Said to every connection: a silent node's sockets may stay open.
        for c in list(self.connections):
            if not c.closed and c is not node.conn and c.state.get("node_events"):
                c.send("node_dead", {"node_id": node_id, "reason": reason})
        if not node.conn.closed:
            node.conn.send("declared_dead", {"reason": reason})
        for actor in list(self.actors.values()):
            if actor.node_id == node_id and actor.state in ("ALIVE", "PENDING_CREATION"):
                self._actor_failed(actor, f"its node {node_id.hex()[:12]} died ({reason})")
        self.placement_groups.on_node_change()

    async def monitor_nodes(self) -> None:
        while True:
            await asyncio.sleep(config.heartbeat_interval)
            now = time.monotonic()
            for node in list(self.nodes.values()):
                silent = now - node.last_heartbeat
                if node.state == "ALIVE" and silent > self.node_death_timeout:
                    self._node_died(
                        node.node_id,
                        f"no heartbeat for {silent:.1f} s (node death timeout "
                        f"{self.node_death_timeout:g} s)",
                    )

    def alive_nodes(self) -> list[NodeInfo]:
        return [n for n in self.nodes.values() if n.state == "ALIVE"]

    # -- jobs ------------------------------------------------------------------------------
    def h_register_job(self, conn: Connection, body: dict) -> dict:
        job_id = body["job_id"]
        body = dict(body, start_time=time.time(), state="RUNNING")
        self.jobs[job_id] = body
        conn.state["job_id"] = job_id
        return {"ok": True}

    def h_job_finished(self, conn: Connection, body: dict) -> dict:
        self._finish_job(body["job_id"], "the driver exited")
        conn.state.pop("job_id", None)
        return {"ok": True}

    def _finish_job(self, job_id: bytes, reason: str) -> None:
        job = self.jobs.get(job_id)
        if job is None or job.get("state") == "FINISHED":
            return
        job["state"] = "FINISHED"
        job["end_time"] = time.time()
        # Non-detached actors share their job's fate.
        for actor in list(self.actors.values()):
            if actor.job_id == job_id and not actor.detached and actor.state != "DEAD":
                self._kill(actor, f"its job ended ({reason})", graceful=False)
        self.placement_groups.on_job_finished(job_id)
        for node in self.alive_nodes():
            node.conn.send("job_finished", {"job_id": job_id})

    # -- actors ----------------------------------------------------------------------------
    def h_create_actor(self, conn: Connection, spec: Any) -> dict:
        actor = ActorInfo(spec)
        if actor.name:
            key = (actor.namespace, actor.name)
            existing = self.named.get(key)
            if existing is not None and self.actors[existing].state != "DEAD":
                raise ValueError(
                    f"The name {actor.name!r} (namespace {actor.namespace!r}) is already taken "
                    f"by actor {existing.hex()}. Pick another name, kill that actor first, or "
                    f"pass get_if_exists=True to get a handle to it."
                )
            seed_global = self._detached_from_anonymous(actor.name, actor.namespace)
            if actor.detached and seed_global is not None:
                other = self.actors[seed_global]
                raise ValueError(
                    f"The name {actor.name!r} is already taken by detached actor "
                    f"{seed_global.hex()} (namespace {other.namespace!r}); a detached actor "
                    f"made without a namespace has a cluster-wide name. Pick another name, "
                    f"kill that actor first, or pass namespace=... to ember.init()."
                )
            self.named[key] = actor.actor_id
        self.actors[actor.actor_id] = actor
        self.subscribers.setdefault(actor.actor_id, set()).add(conn)
        self._schedule(actor)
        return {"ok": True}

    def _schedule(self, actor: ActorInfo) -> None:
        asyncio.ensure_future(self._place(actor))

    def _pick_node(self, actor: ActorInfo) -> NodeInfo | None:
        from ember.scheduling import pick_node

        needs_cpu = (actor.spec.actor_options or {}).get("needs_cpu_node", False)
        return pick_node(
            self.alive_nodes(),
            actor.spec.resources,
            actor.spec.strategy,
            needs_cpu_node=needs_cpu,
            placement_groups=self.placement_groups,
        )

    async def _place(self, actor: ActorInfo) -> None:
        node = self._pick_node(actor)
        if node is None:
            actor.pending_reason = self._why_pending(actor)
            if actor.actor_id not in self.pending_actors:
                self.pending_actors.append(actor.actor_id)
            return
        actor.pending_reason = ""
        try:
            grant = await node.conn.call(
                "lease_actor_worker",
                {
                    "actor_id": actor.actor_id,
                    "resources": actor.spec.resources,
                    "job_id": actor.job_id,
                    "class_name": actor.class_name,
                    "strategy": actor.spec.strategy,
                },
            )
        except Exception as e:
            logger.warning("lease for actor %s failed: %s", actor.actor_id.hex(), e)
            await asyncio.sleep(0.1)
            if actor.state in ("PENDING_CREATION", "RESTARTING"):
                self._schedule(actor)
            return
        if actor.state not in ("PENDING_CREATION", "RESTARTING"):
            node.conn.send("return_actor_lease", {"lease_id": grant["lease_id"], "kill": True})
            return
        if grant is None:  # the node could not after all; try again later
            if actor.actor_id not in self.pending_actors:
                self.pending_actors.append(actor.actor_id)
            return
        actor.lease_id = grant["lease_id"]
        actor.worker_id = grant["worker_id"]
        actor.node_id = node.node_id
        actor.pid = grant.get("pid")
        spec = actor.spec
        spec.gpu_ids = grant.get("gpu_ids", [])
        try:
            wconn = await conn_mod.connect(
                grant["address"],
                {},
                name=f"actor:{actor.actor_id.hex()[:8]}",
                on_close=lambda c, a=actor: self._actor_conn_closed(a, c),
            )
            self.worker_conns[actor.worker_id] = wconn
            reply = await wconn.call("create_actor", spec)
        except Exception as e:
            self._actor_failed(actor, f"its worker died during creation: {e}")
            return
        if reply.get("error"):
            # The constructor raised: the actor is dead and its calls raise that error.
            from ember.serialization import deserialize

            loc = reply["returns"][0]
            try:
                err = deserialize(loc[2], loc[3])
                cause = f"the constructor raised:\n{err}"
            except Exception as ex:
                cause = f"the constructor raised an error that could not be read: {ex}"
            actor.no_restart = True
            self._set_dead(actor, cause)
            wconn.send("exit", {"reason": "constructor failed"})
            return
        actor.address = grant["address"]
        actor.state = "ALIVE"
        self._publish(actor)

    def _why_pending(self, actor: ActorInfo) -> str:
        """What the actor asked for against what exists (infeasible) or is free now (pending):
        the Actors page and ``ember status`` show this to say why it is not placed."""
        shape = actor.spec.resources
        nodes = self.alive_nodes()
        able = [n for n in nodes if fits(shape, n.total)]
        if not able:
            have = _per_node(nodes, lambda n: _fmt_shape(n.total))
            return f"infeasible: no node has {_fmt_shape(shape)} (nodes have: {have})"

        # Only the resources asked for: a node's other resources do not explain the wait.
        def free(n: NodeInfo) -> str:
            now = _fmt_shape({k: n.available.get(k, 0.0) for k in shape})
            total = _fmt_shape({k: n.total.get(k, 0.0) for k in shape})
            return f"{now} of {total} on node {n.node_id.hex()[:8]}"

        return f"waiting for resources {_fmt_shape(shape)} to be free (free now: {_per_node(able, free)})"

    def _schedule_pending_actors(self) -> None:
        pending, self.pending_actors = self.pending_actors, []
        for actor_id in pending:
            actor = self.actors.get(actor_id)
            if actor is not None and actor.state in ("PENDING_CREATION", "RESTARTING"):
                self._schedule(actor)

    def _actor_conn_closed(self, actor: ActorInfo, conn: Connection) -> None:
        if self.worker_conns.get(actor.worker_id) is conn:
            del self.worker_conns[actor.worker_id]

    def h_worker_died(self, conn: Connection, body: dict) -> None:
        """From a raylet: one of its workers exited."""
        actor_id = body.get("actor_id")
        actor = self.actors.get(actor_id) if actor_id else None
        if actor is None or actor.worker_id != body["worker_id"]:
            self._schedule_pending_actors()
            return
        if actor.state in ("ALIVE", "PENDING_CREATION"):
            reason = body.get("reason", "its worker process died")
            if actor.no_restart and actor.death_cause:
                reason = actor.death_cause  # it was told to exit; the exit is the cause
            self._actor_failed(actor, reason)
        self._schedule_pending_actors()

    def _actor_failed(self, actor: ActorInfo, reason: str) -> None:
        can_restart = not actor.no_restart and (
            actor.max_restarts == -1 or actor.num_restarts < actor.max_restarts
        )
        owner_alive = actor.detached or self._job_running(actor.job_id)
        if can_restart and owner_alive:
            actor.num_restarts += 1
            actor.state = "RESTARTING"
            actor.address = None
            actor.death_cause = reason
            self._event(
                "WARNING", f"actor {actor.class_name} {actor.actor_id.hex()} restarting: {reason}"
            )
            self._publish(actor)
            self._schedule(actor)
        else:
            if can_restart is False and actor.max_restarts:
                reason += (
                    f" (restarted {actor.num_restarts} of max_restarts={actor.max_restarts} times)"
                )
            self._set_dead(actor, reason)

    def _job_running(self, job_id: bytes) -> bool:
        job = self.jobs.get(job_id)
        return job is None or job.get("state") != "FINISHED"

    def _set_dead(self, actor: ActorInfo, cause: str) -> None:
        if actor.state == "DEAD":
            return
        actor.state = "DEAD"
        actor.death_cause = cause
        actor.end_time = time.time()
        actor.address = None
        if actor.name and self.named.get((actor.namespace, actor.name)) == actor.actor_id:
            del self.named[(actor.namespace, actor.name)]
        self._event("INFO", f"actor {actor.class_name} {actor.actor_id.hex()} died: {cause}")
        self._publish(actor)

    def _publish(self, actor: ActorInfo) -> None:
        info = actor.public()
        for conn in list(self.subscribers.get(actor.actor_id, ())):
            if conn.closed:
                self.subscribers[actor.actor_id].discard(conn)
                continue
            conn.send("actor_update", info)

    def h_subscribe_actor(self, conn: Connection, body: dict) -> None:
        actor_id = body["actor_id"]
        self.subscribers.setdefault(actor_id, set()).add(conn)
        actor = self.actors.get(actor_id)
        if actor is not None:
            conn.send("actor_update", actor.public())
        else:
            conn.send(
                "actor_update",
                {"actor_id": actor_id, "state": "DEAD", "death_cause": "no such actor"},
            )

    def h_unsubscribe_actor(self, conn: Connection, body: dict) -> None:
        subs = self.subscribers.get(body["actor_id"])
        if subs is not None:
            subs.discard(conn)

    def h_get_actor_info(self, conn: Connection, body: dict) -> dict | None:
        actor = self.actors.get(body["actor_id"])
        return None if actor is None else actor.public()

    def _detached_from_anonymous(self, name: str, namespace: str) -> bytes | None:
        """The live detached actor called ``name`` made from an anonymous namespace, when
        ``namespace`` is anonymous too (the seeds' cluster-wide detached names); else None."""
        if not namespace.startswith(ANONYMOUS_NAMESPACE_PREFIX):
            return None
        for (space, other), actor_id in self.named.items():
            actor = self.actors[actor_id]
            if (
                other == name
                and space.startswith(ANONYMOUS_NAMESPACE_PREFIX)
                and actor.detached
                and actor.state != "DEAD"
            ):
                return actor_id
        return None

    def h_get_named_actor(self, conn: Connection, body: dict) -> dict | None:
        namespace = body.get("namespace", "")
        actor_id = self.named.get((namespace, body["name"]))
        if actor_id is None or self.actors[actor_id].state == "DEAD":
            actor_id = self._detached_from_anonymous(body["name"], namespace)
        if actor_id is None:
            return None
        actor = self.actors[actor_id]
        info = actor.public()
        info["methods"] = (actor.spec.actor_options or {}).get("methods")
        info["spec_owner"] = actor.owner
        info["max_task_retries"] = (actor.spec.actor_options or {}).get("max_task_retries", 0)
        info["max_pending_calls"] = (actor.spec.actor_options or {}).get("max_pending_calls", -1)
        return info

    def h_list_named_actors(self, conn: Connection, body: dict) -> list:
        all_ns = body.get("all_namespaces", False)
        ns = body.get("namespace", "")
        return [
            {"name": name, "namespace": space}
            for (space, name), aid in self.named.items()
            if (all_ns or space == ns) and self.actors[aid].state != "DEAD"
        ]

    def h_kill_actor(self, conn: Connection, body: dict) -> dict:
        actor = self.actors.get(body["actor_id"])
        if actor is None:
            return {"ok": False, "message": f"no actor {body['actor_id'].hex()}"}
        if body.get("only_if_not_detached") and actor.detached:
            return {"ok": False, "message": "detached"}
        if actor.state == "DEAD":
            return {"ok": False, "message": f"actor {actor.actor_id.hex()} is already dead"}
        no_restart = body.get("no_restart", True)
        reason = body.get("reason") or "killed by ember.kill()"
        if no_restart:
            actor.no_restart = True
        self._kill(actor, reason, graceful=body.get("graceful", False), restart=not no_restart)
        return {"ok": True}

    def _kill(self, actor: ActorInfo, reason: str, graceful: bool, restart: bool = False) -> None:
        if not restart:
            actor.no_restart = True
        wconn = self.worker_conns.get(actor.worker_id) if actor.worker_id else None
        node = self.nodes.get(actor.node_id) if actor.node_id else None
        if graceful and wconn is not None and not wconn.closed and actor.state == "ALIVE":
            # The actor finishes the calls it has, then reports ``actor_exited``.
            actor.death_cause = reason
            wconn.send("exit", {"reason": reason})
            return
        if wconn is not None and not wconn.closed:
            wconn.send("exit", {"reason": reason, "force": True})  # runs atexit, then exits
        if node is not None and node.state == "ALIVE" and actor.worker_id:
            node.conn.send(
                "kill_worker",
                {"worker_id": actor.worker_id, "reason": reason, "grace": 2.0 if wconn else 0},
            )
        if restart:
            return  # the worker's death restarts it
        self._set_dead(actor, reason)

    def h_actor_exited(self, conn: Connection, body: dict) -> dict:
        actor = self.actors.get(body["actor_id"])
        if actor is not None:
            actor.no_restart = True
            self._set_dead(actor, body.get("reason", "the actor exited"))
        return {"ok": True}

    async def h_set_resource(self, conn: Connection, body: dict) -> dict:
        node = self.nodes.get(body["node_id"])
        if node is None or node.state != "ALIVE":
            return {"ok": False, "message": f"no live node {body['node_id'].hex()}"}
        node.total, node.available = await node.conn.call("set_resource", body)
        self._schedule_pending_actors()
        self.placement_groups.on_node_change()
        return {"ok": True}

    # -- views -----------------------------------------------------------------------------
    def h_list_nodes(self, conn: Connection, body: Any) -> list[dict]:
        return [n.public() for n in self.nodes.values()]

    def h_list_actors(self, conn: Connection, body: Any) -> list[dict]:
        return [a.public() for a in self.actors.values()]

    def h_list_jobs(self, conn: Connection, body: Any) -> list[dict]:
        return list(self.jobs.values())

    def h_cluster_info(self, conn: Connection, body: Any) -> dict:
        return {
            "nodes": [n.public() for n in self.nodes.values()],
            "start_time": self.start_time,
            "pending_actors": [
                {
                    "actor_id": a,
                    "reason": self.actors[a].pending_reason,
                    "class_name": self.actors[a].class_name,
                    "resources": self.actors[a].spec.resources,
                }
                for a in self.pending_actors
                if a in self.actors
            ],
            "placement_groups": self.placement_groups.h_list(conn, None),
            # Put there by whoever starts the dashboard (dashboard/launch.py, from LocalNode.start).
            "dashboard_url": (self.kv.get(DASHBOARD_URL_KEY) or b"").decode(),
        }

    def h_get_events(self, conn: Connection, body: Any) -> list[dict]:
        return list(self.events)

    def _event(self, severity: str, message: str) -> None:
        self.events.append({"time": time.time(), "severity": severity, "message": message})
        if len(self.events) > 10_000:
            del self.events[:1000]

    # -- KV --------------------------------------------------------------------------------
    def h_kv_put(self, conn: Connection, body: dict) -> bool:
        key = (body.get("namespace", ""), body["key"])
        if not body.get("overwrite", True) and key in self.kv:
            return False
        self.kv[key] = body["value"]
        return True

    def h_kv_get(self, conn: Connection, body: dict) -> bytes | None:
        return self.kv.get((body.get("namespace", ""), body["key"]))

    def h_kv_del(self, conn: Connection, body: dict) -> bool:
        return self.kv.pop((body.get("namespace", ""), body["key"]), None) is not None

    def h_kv_keys(self, conn: Connection, body: dict) -> list[bytes]:
        ns, prefix = body.get("namespace", ""), body.get("prefix", b"")
        return [k for (space, k) in self.kv if space == ns and k.startswith(prefix)]


def _fmt_shape(shape: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(shape.items())) + "}" if shape else "{}"


# A pending reason names at most this many nodes, so a 1,000-node cluster keeps it short.
_REASON_NODES = 5


def _per_node(nodes: list[NodeInfo], fmt: Callable[[NodeInfo], str]) -> str:
    """``fmt(node)`` for the first nodes, ``"; "``-joined, with how many were left out."""
    text = "; ".join(fmt(n) for n in nodes[:_REASON_NODES])
    if len(nodes) > _REASON_NODES:
        text += f"; and {len(nodes) - _REASON_NODES} more nodes"
    return text


async def serve(args: argparse.Namespace) -> None:
    gcs = GcsServer(args.session_dir)
    gcs.node_death_timeout = args.node_death_timeout
    if args.token_file:
        from ember.cluster_token import read_token

        conn_mod.set_cluster_token(read_token(args.token_file))
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ember-gcs")
    parser.add_argument("--session-dir", required=True)
    parser.add_argument("--address", required=True, help="unix:/path")
    parser.add_argument("--tcp", default=None, help="tcp:host:port for other nodes")
    parser.add_argument("--token-file", default=None)
    parser.add_argument("--node-death-timeout", type=float, default=config.node_death_timeout)
    parser.add_argument("--ready-fd", type=int, default=-1)
    parser.add_argument("--parent-pid", type=int, default=0)
    args = parser.parse_args(argv)
    from ember.process_util import die_with_parent, setup_process_logging

    setup_process_logging(os.path.join(args.session_dir, "logs", "gcs_server.log"))
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    loop = conn_mod.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(serve(args))
    finally:
        sys.stdout.flush()


if __name__ == "__main__":
    main()
