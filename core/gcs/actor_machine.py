"""An actor's lifecycle in the GCS: its states, the declared moves between them, and a pure
core that turns what happened to an actor into what the GCS must do about it.

The core does no I/O and keeps no tables: ``ActorMachine.handle(actor, event)`` moves the
actor's record and returns instructions (place it, publish the change, release its name,
tell its worker to exit...). ``ActorManager`` (``actors.py``) is the I/O shell that feeds it
events and carries the instructions out. Tests drive the core directly.

Restart rules (as Ray's): a failed actor restarts while ``max_restarts`` allows (-1 is
without limit), unless it was killed for good or told to exit, and unless its job has ended
(a detached actor outlives its job). Otherwise it is DEAD, and a DEAD actor stays DEAD.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from typing import Any

from ember.lifecycle import Lifecycle, LifecycleState, Track
from ember.records import Record as Plain  # "Record" is an instruction here


class ActorState(LifecycleState):
    """Member names are the strings GCS replies carry (the dashboard, CLI and API read them)."""

    # Never entered here: an owner resolves the constructor's arguments before it sends
    # ``create_actor``. Kept so the names match Ray's and the dashboard's mapping.
    DEPENDENCIES_UNREADY = "DEPENDENCIES_UNREADY"
    PENDING_CREATION = "PENDING_CREATION"
    ALIVE = "ALIVE"
    RESTARTING = "RESTARTING"
    DEAD = "DEAD"


_P, _A, _R, _D = (
    ActorState.PENDING_CREATION,
    ActorState.ALIVE,
    ActorState.RESTARTING,
    ActorState.DEAD,
)

# Every way an actor's state may move. The death edges are named by their cause so a
# TransitionError's history says how the actor got where it is.
ACTOR_LIFECYCLE: Lifecycle[ActorState] = Lifecycle(
    "actor",
    {
        _P: {
            "lease_granted": _P,  # a raylet gave it a worker; the constructor goes there next
            "created": _A,
            "restart": _R,  # its worker or node failed with restarts left
            "kill_to_restart": _P,  # killed with no_restart=False: the worker's death restarts it
            "failed": _D,  # failed with no restarts left, or its job is gone
            "constructor_raised": _D,
            "killed": _D,
            "job_ended": _D,
            "exited": _D,
        },
        _A: {
            "restart": _R,
            "kill_to_restart": _A,
            "exit_requested": _A,  # graceful kill: it finishes its calls, then reports exited
            "failed": _D,
            "killed": _D,
            "job_ended": _D,
            "exited": _D,
        },
        _R: {
            "lease_granted": _R,
            "created": _A,
            "restart": _R,  # the new worker died during creation: another restart
            "kill_to_restart": _R,
            "failed": _D,
            "constructor_raised": _D,
            "killed": _D,
            "job_ended": _D,
            "exited": _D,
        },
    },
)

PLACING = frozenset({_P, _R})  # states in which the actor wants a worker
MAX_INCARNATIONS = 16  # ended incarnations an actor's row lists (the latest)


class ActorInfo:
    """The GCS's record of one actor; ``public()`` is what replies and updates carry."""

    def __init__(self, spec: Any) -> None:
        opts = spec.actor_options or {}
        self.spec = spec
        self.actor_id: bytes = spec.actor_id
        self.class_name: str = opts.get("class_name", "")
        self.name: str = opts.get("name", "")
        self.namespace: str = opts.get("namespace", "")
        self.detached: bool = opts.get("detached", False)
        self.max_restarts: int = opts.get("max_restarts", 0)
        # Hosted in a process with others (``shared_process``): its place there is a lease
        # of its own that ends with each incarnation (``EndLease``), not with a process.
        self.shared: bool = bool(opts.get("shared_process"))
        self.owner = spec.owner  # (worker_id, address, node_id)
        self.job_id: bytes = spec.job_id
        self.track: Track[ActorState] = ACTOR_LIFECYCLE.track(spec.actor_id, _P)
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
        self.unschedulable = False  # no node can ever take it (hard affinity): it failed
        # Its ended incarnations before this one, oldest first (the latest MAX_INCARNATIONS):
        # where each ran and why it ended; ``num_restarts`` counts them all.
        self.incarnations: list[dict[str, Any]] = []
        self.incarnation_start: float | None = None  # when the live incarnation was created
        self._spec_blob: bytes | None = None  # the spec as stored (record())

    @property
    def state(self) -> ActorState:
        return self.track.state

    # What storage keeps: the spec and everything the machine moved (not the pending reason,
    # which the next placement attempt says again).
    _KEPT = (
        "address",
        "worker_id",
        "node_id",
        "pid",
        "num_restarts",
        "death_cause",
        "start_time",
        "end_time",
        "lease_id",
        "no_restart",
        "unschedulable",
        "incarnations",
        "incarnation_start",
    )

    def record(self) -> bytes:
        # The spec (with the class, maybe large) never changes: pickled once, not per move.
        if self._spec_blob is None:
            self._spec_blob = pickle.dumps(self.spec)
        kept = {k: getattr(self, k) for k in self._KEPT}
        return pickle.dumps((self._spec_blob, self.track.state.name, kept))

    @classmethod
    def from_record(cls, data: bytes) -> ActorInfo:
        blob, state, kept = pickle.loads(data)
        actor = cls(pickle.loads(blob))
        actor._spec_blob = blob
        actor.track = ACTOR_LIFECYCLE.track(actor.actor_id, ActorState[state])
        for k, v in kept.items():
            setattr(actor, k, v)
        return actor

    @property
    def wants_worker(self) -> bool:
        return self.track.state in PLACING

    def public(self) -> dict[str, Any]:
        return {
            "actor_id": self.actor_id,
            "class_name": self.class_name,
            "name": self.name,
            "namespace": self.namespace,
            "state": self.track.state._name_,  # the documented raw name: .name is slower
            "address": self.address,
            "worker_id": self.worker_id,
            "node_id": self.node_id,
            "pid": self.pid,
            "num_restarts": self.num_restarts,
            "death_cause": self.death_cause,
            "unschedulable": self.unschedulable,
            "pending_reason": self.pending_reason,
            "job_id": self.job_id,
            "detached": self.detached,
            "resources": self.spec.resources,
            "placement_group_id": _group_id(self.spec.strategy),
            "owner_worker_id": self.owner[0] if self.owner else None,
            "parent_task_id": self.spec.parent_task_id,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "incarnations": self.incarnations,
            "creation_task_id": getattr(self.spec, "task_id", None),
            "shared_process": self.shared,
        }


def _group_id(strategy: Any) -> bytes | None:
    """The placement group an actor was placed in (its strategy's), for the listings."""
    if type(strategy) is tuple and strategy and strategy[0] == "PLACEMENT_GROUP":
        return strategy[1]
    return None


# -- events: what happened to an actor -----------------------------------------------------
# ``job_running`` on failure events is whether the actor's job still runs: a non-detached
# actor whose job ended does not restart.


class Registered(Plain):
    """A driver or worker asked for the actor (``create_actor``); its name is taken."""


class LeaseFailed(Plain):
    """The lease request to a raylet raised (the raylet went away mid-call)."""


class LeaseGranted(Plain):
    node_id: bytes
    grant: dict  # the raylet's reply: lease_id, worker_id, address, pid, gpu_ids


class CreationSucceeded(Plain):
    address: str


class CreationFailed(Plain):
    """Connecting to the leased worker or sending it the constructor raised."""

    reason: str
    job_running: bool


class ConstructorRaised(Plain):
    cause: str


class Unschedulable(Plain):
    """No node can ever take the actor as asked (hard affinity to a node that is gone or
    too small): it fails at once, as in Ray, rather than waiting forever."""

    cause: str


class WorkerDied(Plain):
    """A raylet says the actor's current worker exited."""

    reason: str
    job_running: bool


class NodeDied(Plain):
    """The actor's node was declared dead."""

    reason: str
    job_running: bool


class Kill(Plain):
    reason: str
    graceful: bool
    restart: bool  # no_restart=False: the worker's death restarts it
    worker_connected: bool  # the GCS holds an open connection to the actor's worker


class JobEnded(Plain):
    """The actor's job finished: unless detached, the actor shares its job's fate."""

    reason: str


class Exited(Plain):
    """The actor's worker reports it exited on purpose (``exit_actor`` or a graceful kill)."""

    reason: str


ActorEvent = (
    Registered
    | LeaseFailed
    | LeaseGranted
    | CreationSucceeded
    | CreationFailed
    | ConstructorRaised
    | Unschedulable
    | WorkerDied
    | NodeDied
    | Kill
    | JobEnded
    | Exited
)


# -- instructions: what the I/O shell must do ----------------------------------------------


class Place(Plain):
    """Find a node for the actor and ask its raylet for a worker."""


class PushCreation(Plain):
    """Send the constructor to the leased worker."""


class ReturnLease(Plain):
    """A worker was granted to an actor that no longer wants one: hand it back, killed."""

    lease_id: Any


class Publish(Plain):
    """Send the actor's new state to its subscribers (this is how creators and callers
    waiting on it hear that it is alive, restarting or dead)."""


class ReleaseName(Plain):
    """Free the actor's name so a new actor may take it."""


class Record(Plain):
    """Append a cluster event (``ember status``, the dashboard's event list)."""

    severity: str
    message: str


class ExitWorker(Plain):
    """Ask the actor's worker to exit over the GCS's connection to it, if that is open.
    ``force``: run atexit and exit now rather than after the calls it has."""

    reason: str
    force: bool


class KillWorker(Plain):
    """Ask the node's raylet to kill the actor's worker process, if the node is alive (a
    shared-process actor: drop it from its host, and kill the host only if it does not let
    go)."""

    reason: str


class EndLease(Plain):
    """A shared-process actor's incarnation ended: give its place in the host back."""

    lease_id: Any


Instruction = (
    Place
    | PushCreation
    | ReturnLease
    | Publish
    | ReleaseName
    | Record
    | ExitWorker
    | KillWorker
    | EndLease
)

PLACE = Place()
PUSH_CREATION = PushCreation()
PUBLISH = Publish()
RELEASE_NAME = ReleaseName()


class ActorMachine:
    """The pure core of the actor lifecycle. It holds no actors: ``handle`` reads and moves
    the record it is given. ``clock`` gives death times (tests pass a fake one)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        # One method per kind of event: a dict lookup rather than a chain of isinstance
        # checks, since actor creation runs three of these.
        self._on: dict[type, Callable[[ActorInfo, Any], list[Instruction]]] = {
            Registered: self._registered,
            LeaseGranted: self._lease_granted,
            LeaseFailed: self._lease_failed,
            CreationSucceeded: self._creation_succeeded,
            CreationFailed: self._creation_failed,
            ConstructorRaised: self._constructor_raised,
            Unschedulable: self._unschedulable,
            WorkerDied: self._worker_died,
            NodeDied: self._node_died,
            Kill: self._killed,
            JobEnded: self._job_ended,
            Exited: self._exited,
        }

    def handle(self, actor: ActorInfo, event: ActorEvent) -> list[Instruction]:
        """Moves ``actor`` for ``event`` and returns what the shell must do, in order.
        Raises ``TransitionError`` for an event its state does not allow."""
        return self._on[type(event)](actor, event)

    def _registered(self, actor: ActorInfo, event: Registered) -> list[Instruction]:
        return [PLACE]

    def _lease_granted(self, actor: ActorInfo, event: LeaseGranted) -> list[Instruction]:
        grant = event.grant
        if actor.track.state not in PLACING:  # killed or placed while the lease was in flight
            return [ReturnLease(grant["lease_id"])]
        actor.track.fire("lease_granted")
        actor.lease_id = grant["lease_id"]
        actor.worker_id = grant["worker_id"]
        actor.node_id = event.node_id
        actor.pid = grant.get("pid")
        actor.spec.gpu_ids = grant.get("gpu_ids", [])
        actor._spec_blob = None  # the spec changed: stored again
        return [PUSH_CREATION]

    def _lease_failed(self, actor: ActorInfo, event: LeaseFailed) -> list[Instruction]:
        # The shell waited a moment first; the actor may have been killed meanwhile.
        return [PLACE] if actor.track.state in PLACING else []

    def _creation_succeeded(self, actor: ActorInfo, event: CreationSucceeded) -> list[Instruction]:
        if actor.track.state is _D:  # killed while the constructor ran; told to exit then
            return []
        actor.track.fire("created")
        actor.address = event.address
        actor.incarnation_start = self.clock()
        return [PUBLISH]

    def _creation_failed(self, actor: ActorInfo, event: CreationFailed) -> list[Instruction]:
        if actor.track.state is _D:  # killed while the constructor was on its way
            return []
        return self._failed(actor, event.reason, event.job_running)

    def _constructor_raised(self, actor: ActorInfo, event: ConstructorRaised) -> list[Instruction]:
        # Its calls raise the constructor's error; restarting would raise it again.
        actor.no_restart = True
        out = [] if actor.track.state is _D else self._die(actor, "constructor_raised", event.cause)
        return [*out, ExitWorker("constructor failed", force=False)]

    def _unschedulable(self, actor: ActorInfo, event: Unschedulable) -> list[Instruction]:
        if actor.track.state is _D:
            return []
        actor.no_restart = True
        actor.unschedulable = True
        return self._die(actor, "failed", event.cause)

    def _worker_died(self, actor: ActorInfo, event: WorkerDied) -> list[Instruction]:
        state = actor.track.state
        # A RESTARTING actor's failure shows up as CreationFailed instead.
        if state is not _A and state is not _P:
            return []
        reason = event.reason
        if actor.no_restart and actor.death_cause:
            reason = actor.death_cause  # it was told to exit; the exit is the cause
        return self._failed(actor, reason, event.job_running)

    def _node_died(self, actor: ActorInfo, event: NodeDied) -> list[Instruction]:
        state = actor.track.state
        if state is not _A and state is not _P:
            return []
        return self._failed(actor, event.reason, event.job_running)

    def _killed(self, actor: ActorInfo, event: Kill) -> list[Instruction]:
        return self._kill(
            actor, event.reason, event.graceful, event.restart, event.worker_connected
        )

    def _job_ended(self, actor: ActorInfo, event: JobEnded) -> list[Instruction]:
        if actor.detached or actor.track.state is _D:  # a detached actor outlives its job
            return []
        return self._kill(actor, event.reason, False, False, False, edge="job_ended")

    def _exited(self, actor: ActorInfo, event: Exited) -> list[Instruction]:
        actor.no_restart = True
        return [] if actor.track.state is _D else self._die(actor, "exited", event.reason)

    def _failed(self, actor: ActorInfo, reason: str, job_running: bool) -> list[Instruction]:
        """Its worker or node failed: restart it if it may, else it is dead."""
        can_restart = not actor.no_restart and (
            actor.max_restarts == -1 or actor.num_restarts < actor.max_restarts
        )
        if can_restart and (actor.detached or job_running):
            actor.track.fire("restart")
            ended = {
                "node_id": actor.node_id,
                "pid": actor.pid,
                "worker_id": actor.worker_id,
                "start_time": actor.incarnation_start,
                "end_time": self.clock(),
                "death_cause": reason,
            }
            actor.incarnations = [*actor.incarnations, ended][-MAX_INCARNATIONS:]
            actor.incarnation_start = None
            actor.num_restarts += 1
            # The constructor's next run is the creation task's next attempt (as Ray's):
            # its task events are a row of their own, on the node it runs on.
            actor.spec.attempt = actor.num_restarts
            actor._spec_blob = None
            actor.address = None
            actor.death_cause = reason
            what = f"actor {actor.class_name} {actor.actor_id.hex()} restarting: {reason}"
            return [*self._end_lease(actor), Record("WARNING", what), PUBLISH, PLACE]
        if not can_restart and actor.max_restarts:
            reason += (
                f" (restarted {actor.num_restarts} of max_restarts={actor.max_restarts} times)"
            )
        return self._die(actor, "failed", reason)

    def _kill(
        self,
        actor: ActorInfo,
        reason: str,
        graceful: bool,
        restart: bool,
        worker_connected: bool,
        edge: str = "killed",
    ) -> list[Instruction]:
        if not restart:
            actor.no_restart = True
        if graceful and worker_connected and actor.track.state is _A:
            actor.track.fire("exit_requested")
            actor.death_cause = reason
            return [ExitWorker(reason, force=False)]
        # Exit now (atexit runs), and have the raylet kill the process should that not work.
        out: list[Instruction] = [ExitWorker(reason, force=True), KillWorker(reason)]
        if restart:
            actor.track.fire("kill_to_restart")
            return out
        return out + self._die(actor, edge, reason)

    def _die(self, actor: ActorInfo, edge: str, cause: str) -> list[Instruction]:
        actor.track.fire(edge)
        actor.death_cause = cause
        actor.end_time = self.clock()
        actor.address = None
        what = f"actor {actor.class_name} {actor.actor_id.hex()} died: {cause}"
        return [*self._end_lease(actor), RELEASE_NAME, Record("INFO", what), PUBLISH]

    @staticmethod
    def _end_lease(actor: ActorInfo) -> list[Instruction]:
        """A dedicated actor's lease ends with its process (the raylet sees it exit); a
        shared-process actor's place in its host is given back as its incarnation ends."""
        if not actor.shared or actor.lease_id is None:
            return []
        lease_id, actor.lease_id = actor.lease_id, None
        return [EndLease(lease_id)]
