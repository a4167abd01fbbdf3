"""The GCS's actor manager: the I/O shell around the actor lifecycle (``actor_machine.py``).

It holds the actor table, the names, the subscribers and the GCS's connections to actor
workers. It places actors (a node whose free resources fit, then a worker leased from that
node's raylet, then the constructor sent to that worker), feeds what happens to the pure
``ActorMachine`` and carries out the instructions it returns. Every state change goes
through the machine; this module never sets a state itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember.exceptions import ActorAlreadyExistsError
from ember.gcs.actor_machine import (
    ActorInfo,
    ActorMachine,
    ActorState,
    ConstructorRaised,
    CreationFailed,
    CreationSucceeded,
    EndLease,
    Exited,
    ExitWorker,
    Instruction,
    JobEnded,
    Kill,
    KillWorker,
    LeaseFailed,
    LeaseGranted,
    NodeDied,
    Place,
    Publish,
    Record,
    Registered,
    ReleaseName,
    ReturnLease,
    Unschedulable,
    WorkerDied,
)
from ember.gcs.jobs import JobTable
from ember.gcs.nodes import NodeInfo, NodeTable
from ember.gcs.pending_words import free_of, group_of, in_group, per_node
from ember.gcs.shared_places import SharedPlaces
from ember.options import ANONYMOUS_NAMESPACE_PREFIX
from ember.protocol import connection as conn_mod
from ember.protocol.connection import Connection
from ember.protocol.messages.gcs import NoSuchActor
from ember.resources import fits, fmt
from ember.runtime_env import env_key
from ember.scheduling import NodeView, pick_node

if TYPE_CHECKING:
    from ember.gcs.storage import Store

logger = logging.getLogger("ember.gcs")

_DEAD = ActorState.DEAD


class ActorManager:
    """``connect`` opens the GCS's connection to an actor's worker (tests pass a fake);
    ``clock`` gives death times."""

    def __init__(
        self,
        nodes: NodeTable,
        jobs: JobTable,
        record: Callable[[str, str], None],
        placement_groups: Any = None,
        connect: Callable[..., Any] = conn_mod.connect,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.nodes = nodes
        self.jobs = jobs
        self.record = record
        self.placement_groups = placement_groups
        self.connect = connect
        self.machine = ActorMachine(clock)
        self.actors: dict[bytes, ActorInfo] = {}  # {actor_id: ActorInfo}
        self.named: dict[tuple[str, str], bytes] = {}  # {(namespace, name): actor_id}
        self.subscribers: dict[bytes, set[Connection]] = {}  # {actor_id: connections}
        self.worker_conns: dict[bytes, Connection] = {}  # {worker_id: connection we opened}
        self.pending: list[bytes] = []  # actor ids waiting for a node with resources
        # {actor id: node} of the lease requests a raylet holds now: their reasons are
        # worded again when listed (what is free there changes with every heartbeat).
        self.leasing: dict[bytes, NodeInfo] = {}
        # Nodes whose raylet answered "not now" to an actor lease our view said fits there
        # (a view a heartbeat old: the room was taken, e.g. a driver's idle task lease). When
        # the room frees, their next heartbeat may show nothing more free than the view did,
        # so that beat places the waiting actors again whatever it shows.
        self._refused_by: set[bytes] = set()
        self.store: Store | None = None  # where actor records are kept
        # {actor_id: (node_id, worker_id)}: restored actors whose creation a GCS restart cut
        # off; _place ends that worker before placing the actor again.
        self.cut_off: dict[bytes, tuple[bytes, bytes]] = {}
        self.shared = SharedPlaces(self)  # shared-process actors' places in their hosts
        self._do = {
            Place: lambda a, i: self._schedule(a),
            Publish: lambda a, i: self._publish(a),
            ReleaseName: self._release_name,
            Record: lambda a, i: self.record(i.severity, i.message),
            ExitWorker: self._exit_worker,
            KillWorker: self._kill_worker,
            EndLease: self.shared.end_lease,
        }

    # -- storage --------------------------------------------------------------------------
    def _save(self, actor: ActorInfo) -> None:
        if self.store is not None:
            self.store.mark("actors", actor.actor_id, actor.record)

    def restore(self, rows: dict[bytes, bytes]) -> None:
        """The actors a previous GCS process knew, with their names. A live actor's worker
        kept running and its callers reach it directly; one that was being placed is placed
        again once nodes reconnect."""
        for actor_id, data in rows.items():
            actor = ActorInfo.from_record(data)
            self.actors[actor_id] = actor
            if actor.state is _DEAD:
                continue
            if actor.name:
                self.named[(actor.namespace, actor.name)] = actor_id
            if actor.wants_worker:
                actor.pending_reason = "waiting for the nodes to reconnect after a GCS restart"
                if actor.worker_id is not None and actor.node_id is not None:
                    # Its constructor may still run there, answering the dead GCS: that
                    # worker is ended before the actor is placed again.
                    self.cut_off[actor_id] = (actor.node_id, actor.worker_id)
                self._park(actor)

    # -- carrying out the machine's instructions ------------------------------------------
    def carry_out(self, actor: ActorInfo, instructions: list[Instruction]) -> None:
        self._save(actor)  # every event the machine handled may have moved the record
        for ins in instructions:
            self._do[type(ins)](actor, ins)

    def _release_name(self, actor: ActorInfo, ins: ReleaseName) -> None:
        key = (actor.namespace, actor.name)
        if actor.name and self.named.get(key) == actor.actor_id:
            del self.named[key]

    def _exit_worker(self, actor: ActorInfo, ins: ExitWorker) -> None:
        if actor.shared:
            self.shared.exit(actor, ins)
            return
        wconn = self.worker_conns.get(actor.worker_id) if actor.worker_id else None
        if wconn is not None and not wconn.closed:
            body = {"reason": ins.reason, "force": True} if ins.force else {"reason": ins.reason}
            wconn.send("exit", body)

    def _kill_worker(self, actor: ActorInfo, ins: KillWorker) -> None:
        if actor.shared:
            self.shared.kill(actor, ins)
            return
        node = self.nodes.get_alive(actor.node_id)
        if node is not None and actor.worker_id:
            # With a connection it was told to exit first: give atexit a moment.
            grace = 2.0 if actor.worker_id in self.worker_conns else 0
            node.conn.send(
                "kill_worker", {"worker_id": actor.worker_id, "reason": ins.reason, "grace": grace}
            )

    def _publish(self, actor: ActorInfo) -> None:
        subs = self.subscribers.get(actor.actor_id)
        if not subs:
            return
        info = actor.public()
        for conn in list(subs):
            if conn.closed:
                subs.discard(conn)
                continue
            conn.send("actor_update", info)

    # -- creation and placement -----------------------------------------------------------
    def h_create_actor(self, conn: Connection, spec: Any) -> dict:
        known = self.actors.get(spec.actor_id)
        if known is not None:
            # Sent again by an owner whose first request's reply was lost with a GCS
            # process that had already stored it.
            self.subscribers.setdefault(known.actor_id, set()).add(conn)
            return {"ok": True}
        actor = ActorInfo(spec)
        if actor.name:
            key = (actor.namespace, actor.name)
            existing = self.named.get(key)
            if existing is not None and self.actors[existing].state is not _DEAD:
                # Ray's class and words (users match on "is already taken" and get_actor).
                raise ActorAlreadyExistsError(
                    f"The name {actor.name} (namespace={actor.namespace!r}) is already taken "
                    f"by actor {existing.hex()}. Please use a different name or get the "
                    f"existing actor using ember.get_actor({actor.name!r}, "
                    f"namespace={actor.namespace!r}), or create it with get_if_exists=True."
                )
            seed_global = self._detached_from_anonymous(actor.name, actor.namespace)
            if actor.detached and seed_global is not None:
                other = self.actors[seed_global]
                raise ActorAlreadyExistsError(
                    f"The name {actor.name!r} is already taken by detached actor "
                    f"{seed_global.hex()} (namespace {other.namespace!r}); a detached actor "
                    f"made without a namespace has a cluster-wide name. Pick another name, "
                    f"kill that actor first, or pass namespace=... to ember.init()."
                )
            self.named[key] = actor.actor_id
        self.actors[actor.actor_id] = actor
        self.subscribers.setdefault(actor.actor_id, set()).add(conn)
        self.carry_out(actor, self.machine.handle(actor, Registered()))
        return {"ok": True}

    def _schedule(self, actor: ActorInfo) -> None:
        asyncio.ensure_future(self._place(actor))

    def _park(self, actor: ActorInfo) -> None:
        if actor.actor_id not in self.pending:
            self.pending.append(actor.actor_id)
            self.nodes.on_demand()

    def _pick_node(self, actor: ActorInfo) -> NodeInfo | None:
        needs_cpu = (actor.spec.actor_options or {}).get("needs_cpu_node", False)
        return pick_node(
            self.nodes.placeable(),
            actor.spec.resources,
            actor.spec.strategy,
            needs_cpu_node=needs_cpu,
            placement_groups=self.placement_groups,
        )

    def _pick_node_to_wait_on(self, actor: ActorInfo) -> NodeInfo | None:
        """No node has room now: a node whose total could hold the actor, where its lease
        request waits (``wait_for_room``) and the raylet asks its task leases back, as Ray
        queues an actor at a raylet. Parked here instead, it waited for a heartbeat showing
        room, which a driver running task after task on a held lease never lets one show.
        None for a shared-process actor or one in a placement group (those wait as before)."""
        if actor.shared or group_of(actor.spec.strategy):
            return None
        needs_cpu = (actor.spec.actor_options or {}).get("needs_cpu_node", False)
        as_if_free = [NodeView(n.node_id, n.total, n.total) for n in self.nodes.placeable()]
        chosen = pick_node(
            as_if_free,
            actor.spec.resources,
            actor.spec.strategy,
            needs_cpu_node=needs_cpu,
            placement_groups=self.placement_groups,
        )
        return self.nodes.get_alive(chosen.node_id) if chosen is not None else None

    def _end_cut_off_creation(self, actor: ActorInfo) -> None:
        node_id, worker_id = self.cut_off.pop(actor.actor_id)
        node = self.nodes.get_alive(node_id)
        if node is not None and actor.shared:
            self.shared.end_cut_off(actor, node)
        elif node is not None:
            reason = "its actor's creation was cut off by a GCS restart; placed again"
            node.conn.send("kill_worker", {"worker_id": worker_id, "reason": reason, "grace": 0})
        actor.worker_id = actor.node_id = actor.pid = None

    async def _place(self, actor: ActorInfo) -> None:
        if actor.actor_id in self.cut_off:
            self._end_cut_off_creation(actor)
        never = self._never_placed(actor)
        if never:
            self.carry_out(actor, self.machine.handle(actor, Unschedulable(never)))
            return
        node = self._pick_node(actor)
        wait_for_room = False
        if node is None:
            node = self._pick_node_to_wait_on(actor)
            if node is None:
                actor.pending_reason = self._why_pending(actor)
                self._park(actor)
                return
            wait_for_room = True
        actor.pending_reason = self._why_waiting_on(actor, node)
        self.leasing[actor.actor_id] = node
        body = {
            "actor_id": actor.actor_id,
            "resources": actor.spec.resources,
            "job_id": actor.job_id,
            "class_name": actor.class_name,
            "strategy": actor.spec.strategy,
            # Its own runtime_env: a worker kept for that env hosts it (a shared-process
            # actor's is its job's: a host kept for the job and env).
            "env": env_key(actor.spec.runtime_env),
        }
        if actor.shared:
            op = "lease_shared_actor"
        else:
            op = "lease_actor_worker"
            # Restarts left: the node's memory monitor kills such an actor first.
            body["retriable"] = actor.max_restarts == -1 or actor.num_restarts < actor.max_restarts
            if wait_for_room:
                body["wait_for_room"] = True
        try:
            grant = await node.conn.call(op, body)
        except Exception as e:
            self.leasing.pop(actor.actor_id, None)
            logger.warning("lease for actor %s failed: %s", actor.actor_id.hex(), e)
            await asyncio.sleep(0.1)
            self.carry_out(actor, self.machine.handle(actor, LeaseFailed()))
            return
        self.leasing.pop(actor.actor_id, None)
        actor.pending_reason = ""
        if grant is None:  # the node could not after all; try again later
            self._refused_by.add(node.node_id)
            if actor.wants_worker:
                actor.pending_reason = self._why_pending(actor)  # parked: say why meanwhile
                self._park(actor)
            return
        out = self.machine.handle(actor, LeaseGranted(node.node_id, grant))
        if type(out[0]) is ReturnLease:
            node.conn.send("return_actor_lease", {"lease_id": out[0].lease_id, "kill": True})
            return
        # Kept, so a GCS started while the constructor runs can end that worker (restore).
        self._save(actor)
        try:
            if actor.shared:
                wconn = await self.shared.connection(grant)
            else:
                wconn = await self.connect(
                    grant["address"],
                    {},
                    name=f"actor:{actor.actor_id.hex()[:8]}",
                    on_close=lambda c, a=actor: self._actor_conn_closed(a, c),
                )
                self.worker_conns[actor.worker_id] = wconn
            reply = await wconn.call("create_actor", actor.spec)
        except Exception as e:
            event = CreationFailed(
                f"its worker died during creation: {e}", self.jobs.running(actor.job_id)
            )
            self.carry_out(actor, self.machine.handle(actor, event))
            return
        if reply.get("error"):
            self.carry_out(actor, self.machine.handle(actor, ConstructorRaised(_cause(reply))))
            return
        self.carry_out(actor, self.machine.handle(actor, CreationSucceeded(grant["address"])))

    def _never_placed(self, actor: ActorInfo) -> str:
        """Why no node can ever take the actor ("" when one may): its hard node affinity
        names a node that is not alive, or one that does not have what it asks for."""
        strategy = actor.spec.strategy
        if not (isinstance(strategy, tuple) and strategy[0] == "NODE_AFFINITY") or strategy[2]:
            return ""
        target = strategy[1]
        node = next((n for n in self.nodes.alive() if n.node_id == target), None)
        if node is None:
            return (
                f"the node {target.hex()} named by NodeAffinitySchedulingStrategy(soft=False) "
                "is not alive; pass soft=True to run elsewhere"
            )
        if not fits(actor.spec.resources, node.total):
            return (
                f"it asks for {fmt(actor.spec.resources)}, which the node "
                f"{target.hex()} of its NodeAffinitySchedulingStrategy(soft=False) does not "
                f"have ({fmt(node.total)}); pass soft=True to run elsewhere"
            )
        return ""

    def _why_pending(self, actor: ActorInfo) -> str:
        """What the actor asked for against what exists (infeasible) or is free now (pending):
        the Actors page and ``ember status`` show this to say why it is not placed."""
        shape = actor.spec.resources
        nodes = self.nodes.alive()
        if group_of(actor.spec.strategy):
            return in_group(shape, actor.spec.strategy, self.placement_groups, nodes)
        able = [n for n in nodes if fits(shape, n.total)]
        if not able:
            have = per_node(nodes, lambda n: fmt(n.total))
            return f"infeasible: no node has {fmt(shape)} (nodes have: {have})"
        # Only the resources asked for: a node's other resources do not explain the wait.
        free = per_node(able, lambda n: free_of(n, shape))
        return f"waiting for resources {fmt(shape)} to be free (free now: {free})"

    def _why_waiting_on(self, actor: ActorInfo, node: NodeInfo) -> str:
        """The reason while the chosen node's raylet holds the lease request (a node that
        has the room answers at once, and the reason is cleared before anyone reads it)."""
        shape = actor.spec.resources
        if group_of(actor.spec.strategy):
            return in_group(shape, actor.spec.strategy, self.placement_groups, [node])
        if not fits(shape, node.available):  # waiting there for the room (wait_for_room)
            return self._why_pending(actor)
        return f"waiting for a worker with {fmt(shape)} (free now: {free_of(node, shape)})"

    def schedule_pending(self) -> None:
        """Tries again to place every actor waiting for resources."""
        pending, self.pending = self.pending, []
        for actor_id in pending:
            actor = self.actors.get(actor_id)
            if actor is not None and actor.wants_worker:
                self._schedule(actor)

    def on_heartbeat(self, node: NodeInfo, before: dict[str, float]) -> None:
        # Resources came free (tasks ended, leases went back): an actor waiting for them may
        # fit now. Without this it waited for the next node join or worker death. A node
        # that refused a lease since its last beat: again at this one (``_refused_by``).
        refused = node.node_id in self._refused_by
        if refused:
            self._refused_by.discard(node.node_id)
        if self.pending and (
            refused or any(v > before.get(k, 0.0) for k, v in node.available.items())
        ):
            self.schedule_pending()

    def pending_view(self) -> list[dict]:
        """The actors waiting for a node, and why (``cluster_info``)."""
        return [
            {
                "actor_id": a,
                "reason": self.actors[a].pending_reason,
                "class_name": self.actors[a].class_name,
                "resources": self.actors[a].spec.resources,
            }
            for a in self.pending
            if a in self.actors
        ]

    # -- failures, kills and exits ----------------------------------------------------------
    def _actor_conn_closed(self, actor: ActorInfo, conn: Connection) -> None:
        if self.worker_conns.get(actor.worker_id) is conn:
            del self.worker_conns[actor.worker_id]

    def h_worker_died(self, conn: Connection, body: dict) -> None:
        """From a raylet: one of its workers exited."""
        actor_id = body.get("actor_id")
        actor = self.actors.get(actor_id) if actor_id else None
        if actor is not None and actor.worker_id == body["worker_id"]:
            reason = body.get("reason", "its worker process died")
            event = WorkerDied(reason, self.jobs.running(actor.job_id))
            self.carry_out(actor, self.machine.handle(actor, event))
        # Its resources are free again: an actor waiting for them may fit now.
        self.schedule_pending()

    def reconcile_leases(self, node: NodeInfo, leases: list) -> None:
        """``leases``: the actor leases (lease id, worker id, actor id) a node's raylet holds
        as it registers again after a GCS restart. One this GCS's actor table does not name
        (the old process asked for it and died before the reply, or before storing it) has
        no actor on it and never will: the raylet ends it. Known ones stay: a live actor's,
        and a cut-off creation's, which ``_place`` ends before placing the actor again."""
        for lease_id, worker_id, actor_id in leases:
            actor = self.actors.get(actor_id)
            if (
                actor is not None
                and actor.state is not _DEAD
                and actor.worker_id == worker_id
                and actor.node_id == node.node_id
            ):
                continue
            logger.warning(
                "ending lease %s of worker %s on node %s: actor %s's lease is unknown to "
                "this GCS (its grant was answered to the GCS process before it)",
                lease_id,
                worker_id.hex()[:12],
                node.node_id.hex()[:12],
                actor_id.hex(),
            )
            node.conn.send("return_actor_lease", {"lease_id": lease_id, "kill": True})

    def on_node_died(self, node_id: bytes, reason: str) -> None:
        self._refused_by.discard(node_id)
        why = f"its node {node_id.hex()[:12]} died ({reason})"
        for actor in list(self.actors.values()):
            if actor.node_id == node_id:
                event = NodeDied(why, self.jobs.running(actor.job_id))
                self.carry_out(actor, self.machine.handle(actor, event))

    def on_job_finished(self, job_id: bytes, reason: str) -> None:
        event = JobEnded(f"its job ended ({reason})")
        for actor in list(self.actors.values()):
            if actor.job_id == job_id:
                self.carry_out(actor, self.machine.handle(actor, event))

    def h_kill_actor(self, conn: Connection, body: dict) -> None:
        actor = self.actors.get(body["actor_id"])
        if actor is None:
            raise NoSuchActor(f"no actor {body['actor_id'].hex()}")
        if body.get("only_if_not_detached") and actor.detached:
            return  # a detached actor outlives its handles: nothing to do, as asked
        if actor.state is _DEAD:
            return  # killing is idempotent
        wconn = self.worker_conns.get(actor.worker_id) if actor.worker_id else None
        event = Kill(
            body.get("reason") or "it was killed by `ember.kill`",
            graceful=body.get("graceful", False),
            restart=not body.get("no_restart", True),
            worker_connected=wconn is not None and not wconn.closed,
        )
        self.carry_out(actor, self.machine.handle(actor, event))

    def h_actor_exited(self, conn: Connection, body: dict) -> dict:
        actor = self.actors.get(body["actor_id"])
        if actor is not None:
            event = Exited(body.get("reason", "the actor exited"))
            self.carry_out(actor, self.machine.handle(actor, event))
        return {"ok": True}

    # -- subscriptions and lookups ----------------------------------------------------------
    def h_subscribe_actor(self, conn: Connection, body: dict) -> None:
        actor_id = body["actor_id"]
        self.subscribers.setdefault(actor_id, set()).add(conn)
        actor = self.actors.get(actor_id)
        if actor is not None:
            conn.send("actor_update", actor.public())
        else:
            conn.send(
                "actor_update",
                {"actor_id": actor_id, "state": _DEAD.name, "death_cause": "no such actor"},
            )

    def h_unsubscribe_actor(self, conn: Connection, body: dict) -> None:
        subs = self.subscribers.get(body["actor_id"])
        if subs is not None:
            subs.discard(conn)

    def forget_connection(self, conn: Connection) -> None:
        for subs in self.subscribers.values():
            subs.discard(conn)

    def h_get_actor_info(self, conn: Connection, body: dict) -> dict | None:
        actor = self.actors.get(body["actor_id"])
        return None if actor is None else actor.public()

    def h_list_actors(self, conn: Connection, body: Any) -> list[dict]:
        if len(self.leasing) <= _REWORDED_AT_MOST:
            for actor_id, node in self.leasing.items():
                actor = self.actors.get(actor_id)
                if actor is not None:
                    actor.pending_reason = self._why_waiting_on(actor, node)
        return [a.public() for a in self.actors.values()]

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
                and actor.state is not _DEAD
            ):
                return actor_id
        return None

    def h_get_named_actor(self, conn: Connection, body: dict) -> dict | None:
        namespace = body.get("namespace", "")
        actor_id = self.named.get((namespace, body["name"]))
        if actor_id is None or self.actors[actor_id].state is _DEAD:
            actor_id = self._detached_from_anonymous(body["name"], namespace)
        if actor_id is None:
            return None
        actor = self.actors[actor_id]
        opts = actor.spec.actor_options or {}
        info = actor.public()
        info["methods"] = opts.get("methods")
        info["spec_owner"] = actor.owner
        info["max_task_retries"] = opts.get("max_task_retries", 0)
        info["max_pending_calls"] = opts.get("max_pending_calls", -1)
        return info

    def h_list_named_actors(self, conn: Connection, body: dict) -> list:
        all_ns = body.get("all_namespaces", False)
        ns = body.get("namespace", "")
        return [
            {"name": name, "namespace": space}
            for (space, name), aid in self.named.items()
            if (all_ns or space == ns) and self.actors[aid].state is not _DEAD
        ]


# Reasons worded again per listing at most for this many waiting leases (a listing of a big
# burst of actors stays as cheap as before; their first wording stays).
_REWORDED_AT_MOST = 1000


def _cause(reply: dict) -> str:
    """The death cause for a constructor that raised: its error, as the worker sent it."""
    from ember.serialization import deserialize

    loc = reply["returns"][0]
    try:
        err = deserialize(loc[2], loc[3])
        return f"the constructor raised:\n{err}"
    except Exception as ex:
        return f"the constructor raised an error that could not be read: {ex}"
