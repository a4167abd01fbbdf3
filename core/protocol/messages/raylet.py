"""Messages a raylet handles (``ember.raylet.raylet``, one per node).

Senders: the core workers of its node (leases, the shared-memory object store, blocking),
the GCS (actor leases, placement-group bundles, node deaths), other raylets (object
transfer) and tools (the node's dashboard agent, the CLI, tests). Ids are raw ``bytes``.
A lease grant is ``{"lease_id", "worker_id", "address", "gpu_ids", "pid", "node_id"}``.
"""

from __future__ import annotations

from typing import Any

from ember.protocol.errors import Refused
from ember.protocol.messages.base import OMIT, Catalogue, Message

RAYLET = Catalogue("raylet", "ember.raylet.raylet.Raylet")


class RayletMessage(Message):
    catalogue = RAYLET


# -- clients and leases --------------------------------------------------------------------
class RegisterClient(RayletMessage):
    """A driver or worker of this node says who it is (first message on its connection)."""

    op = "register_client"
    sent_by = "core worker"
    reply = '{"node_id": bytes}'

    worker_id: bytes
    pid: int
    address: str  # where its own listener is (other workers push tasks there)
    is_driver: bool
    job_id: bytes | None
    log_to_driver: bool = OMIT
    log_paths: dict[str, str] = OMIT  # workers: their .out/.err files


class PullFailed(Refused):
    """An object could not be copied to this node; ``node_gone``: the node holding it is not
    alive (the owner stops reading from it), else it may be readable later."""

    def __init__(self, reason: str, node_gone: bool = False) -> None:
        super().__init__(reason)
        self.node_gone = node_gone

    def __reduce__(self) -> tuple:
        return (type(self), (self.reason, self.node_gone))


class RequestLease(RayletMessage):
    """A worker to run tasks of one resource shape. Answered when granted, possibly long
    after; a raylet that knows a better node answers with a spillback instead."""

    op = "request_lease"
    sent_by = "core worker (task submitter)"
    reply = (
        'lease grant | {"spillback": {"node_id": bytes, "address": str}} | None (cancelled); '
        "raises TaskUnschedulableError when no node can ever run it"
    )

    resources: dict[str, float]
    strategy: Any = OMIT  # None, "SPREAD", or a placement-group / node-affinity strategy
    client: bytes = OMIT
    job_id: bytes | None = OMIT
    name: str = OMIT  # the first queued task's function name (the worker's title)
    spilled: bool = OMIT  # already redirected once: do not spill again
    retriable: bool = OMIT  # its tasks' max_retries is not 0: the memory monitor kills it first
    env: str = OMIT  # its runtime_env's key: only a worker kept for that env runs its tasks
    request_id: int = OMIT  # the client's number for it, for cancel_lease_request


class ReportBacklog(RayletMessage):
    """How many of a client's tasks of one scheduling class wait beyond its lease requests
    (it has at most a few requests out per class): shown in this node's queue as demand."""

    op = "report_backlog"
    sent_by = "core worker (task submitter)"
    oneway = True

    class_id: int  # the client's own key for the class
    resources: dict[str, float]
    strategy: Any = OMIT
    backlog: int  # 0 ends it


class CancelLeaseRequest(RayletMessage):
    """The client no longer needs a lease it asked for (the tasks that wanted it were
    cancelled): if the request still waits here, it is answered None and leaves the queue,
    so it is no longer demand the autoscaler sees."""

    op = "cancel_lease_request"
    sent_by = "core worker (task submitter)"
    oneway = True

    request_id: int


class ReturnLease(RayletMessage):
    op = "return_lease"
    sent_by = "core worker (task submitter)"
    oneway = True

    lease_id: int
    worker_died: bool = OMIT


class LeaseActorWorker(RayletMessage):
    """A dedicated worker for an actor; the GCS then sends it ``create_actor``."""

    op = "lease_actor_worker"
    sent_by = "GCS"
    reply = "lease grant"

    actor_id: bytes
    resources: dict[str, float]
    job_id: bytes | None = OMIT
    class_name: str = OMIT
    strategy: Any = OMIT
    retriable: bool = OMIT  # restarts left: the memory monitor kills it before others
    env: str = OMIT  # its runtime_env's key: a fresh worker, kept for that env, hosts it
    # No node had room in the GCS's view: wait here while no other node has room, asking
    # this node's task leases back (rather than answer "not now").
    wait_for_room: bool = OMIT


class LeaseSharedActor(RayletMessage):
    """A place for a ``shared_process`` actor in one of the job's host processes (started
    if none has room); the GCS then sends the host ``create_actor``. None: not now (its
    resources are not free here)."""

    op = "lease_shared_actor"
    sent_by = "GCS"
    reply = "lease grant, or None"

    actor_id: bytes
    resources: dict[str, float]
    job_id: bytes | None = OMIT
    class_name: str = OMIT
    strategy: Any = OMIT
    env: str = OMIT  # the job's runtime_env key: hosts are kept per job and env


class ReturnActorLease(RayletMessage):
    op = "return_actor_lease"
    sent_by = "GCS (an actor whose creation was abandoned; a shared-process actor that ended)"
    oneway = True

    lease_id: int
    kill: bool = OMIT


class WorkerBlocked(RayletMessage):
    """A worker waits in ``ember.get``: its CPU is lent out until ``worker_unblocked``."""

    op = "worker_blocked"
    sent_by = "core worker"
    oneway = True

    worker_id: bytes


class WorkerUnblocked(RayletMessage):
    op = "worker_unblocked"
    sent_by = "core worker"
    oneway = True

    worker_id: bytes


class WorkerDraining(RayletMessage):
    """A worker retiring after ``max_calls`` still owns objects others use: once its lease
    ends, it stays (serving them, never leased again) until they are released, up to
    ``worker_drain_seconds``, before it exits; it is not killed for lingering meanwhile."""

    op = "worker_draining"
    sent_by = "core worker"
    oneway = True

    worker_id: bytes


class WorkerTitle(RayletMessage):
    """An actor's worker names itself (its class), for listings and logs."""

    op = "worker_title"
    sent_by = "core worker (actor)"
    oneway = True

    worker_id: bytes
    title: str


class KillWorker(RayletMessage):
    op = "kill_worker"
    sent_by = "GCS (kill_actor)"
    oneway = True

    worker_id: bytes
    reason: str = OMIT
    grace: float = OMIT  # seconds to exit on its own first; 0: now


class WorkerExitReason(RayletMessage):
    """How a worker ended (exit code or signal), waiting briefly for its exit to be seen."""

    op = "worker_exit_reason"
    sent_by = "core worker (a task's worker died)"
    reply = "str | None"

    worker_id: bytes


class ListWorkers(RayletMessage):
    op = "list_workers"
    sent_by = "dashboard agent"
    reply = "list[dict] (WorkerProc.public(), then a row per driver connected here)"


# -- the node's shared-memory object store -------------------------------------------------
class PlasmaCreate(RayletMessage):
    """Room for an object in the node's arena; the writer fills it, then ``plasma_seal``.
    An object written again (a retried task) replaces the old copy."""

    op = "plasma_create"
    sent_by = "core worker"
    reply = "int (the offset in the arena); ObjectStoreFullError if there is no room"

    object_id: bytes
    size: int
    owner: Any = OMIT  # (worker_id, address) of the object's owner
    client: bytes = OMIT


class PlasmaSeal(RayletMessage):
    op = "plasma_seal"
    sent_by = "core worker"
    oneway = True

    object_id: bytes


class PlasmaGet(RayletMessage):
    """Pins a sealed object for ``client`` (waiting up to 30 s for a pending seal)."""

    op = "plasma_get"
    sent_by = "core worker"
    reply = "(offset, size) | None"

    object_id: bytes
    client: bytes


class PlasmaGetMany(RayletMessage):
    """``plasma_get`` for each of ``object_ids``, in one call (a get of many objects)."""

    op = "plasma_get_many"
    sent_by = "core worker"
    reply = "list of (offset, size) | None, in order"

    object_ids: list[bytes]
    client: bytes


class PlasmaRelease(RayletMessage):
    """Drops one of ``client``'s pins; ``offset`` names the copy it pinned (the id may have
    been deleted and made again since)."""

    op = "plasma_release"
    sent_by = "core worker"
    oneway = True

    object_id: bytes
    client: bytes
    offset: int = OMIT


class PlasmaDelete(RayletMessage):
    op = "plasma_delete"
    sent_by = "core worker (the owner, when the last reference goes)"
    oneway = True

    object_ids: list[bytes]


class PlasmaAbort(RayletMessage):
    """A created object that will never be sealed (its writer failed)."""

    op = "plasma_abort"
    sent_by = "core worker"
    oneway = True

    object_id: bytes


# -- objects between nodes -----------------------------------------------------------------
class PullObject(RayletMessage):
    """Copy an object from another node into this one's store (once, however many ask)."""

    op = "pull_object"
    sent_by = "core worker"
    reply = (
        "None once the object is here; raises PullFailed, or the store's own error "
        "(ObjectStoreFullError: no room for a copy)"
    )

    object_id: bytes
    node_id: bytes  # the node that has it
    owner: Any = OMIT


class ExportObject(RayletMessage):
    """Another raylet is about to read the object over the data port: pin it until
    ``unexport_object``."""

    op = "export_object"
    sent_by = "raylet"
    reply = "int (its size) | None (not here)"

    object_id: bytes


class UnexportObject(RayletMessage):
    op = "unexport_object"
    sent_by = "raylet"
    oneway = True

    object_id: bytes


# -- placement groups and resources --------------------------------------------------------
class ReserveBundles(RayletMessage):
    op = "reserve_bundles"
    sent_by = "GCS"
    reply = "bool (all reserved; nothing is reserved otherwise); a bundle already here counts"

    pg_id: bytes
    bundles: list[tuple[int, dict[str, float]]]  # (bundle index, shape)


class ReleaseBundles(RayletMessage):
    op = "release_bundles"
    sent_by = "GCS"
    oneway = True

    pg_id: bytes
    indexes: list[int] = OMIT  # only these bundles (default: every one of the group here)


class Drain(RayletMessage):
    """Draining: grant no new task lease here (queued ones go to other nodes, or wait here
    as demand when none can take them); running leases go on. ``draining: False`` ends it."""

    op = "drain"
    sent_by = "GCS (forwarding drain_node)"
    reply = '{"draining": bool, "leases": int, "queued": int, "num_primary": int}'

    draining: bool


class SetResource(RayletMessage):
    op = "set_resource"
    sent_by = "GCS (forwarding set_resource), tests"
    reply = "(total: dict[str, float], available: dict[str, float])"

    name: str
    capacity: float


# -- the cluster ---------------------------------------------------------------------------
class JobFinished(RayletMessage):
    """The job's workers are no longer needed (its leases and idle workers go)."""

    op = "job_finished"
    sent_by = "GCS"
    oneway = True

    job_id: bytes


class DeclaredDead(RayletMessage):
    """The GCS declared this node dead (missed heartbeats): it must stop."""

    op = "declared_dead"
    sent_by = "GCS"
    oneway = True

    reason: str = OMIT


class FreeOwnedObjects(RayletMessage):
    """These owners (drivers or workers) died on another node: delete every copy here of
    the objects they owned, and drop any copy made later."""

    op = "free_owned_objects"
    sent_by = "GCS (forwarding a raylet's owners_died)"
    oneway = True

    owner_ids: list[bytes]


class NodeDead(RayletMessage):
    op = "node_dead"
    sent_by = "GCS"
    oneway = True

    node_id: bytes
    reason: str = OMIT
    drained: bool = OMIT  # it was draining: it left as planned (a scale-down)


class NodeAdded(RayletMessage):
    """Sent to every node-event subscriber; a raylet ignores it (its view comes with
    heartbeats)."""

    op = "node_added"
    sent_by = "GCS"
    oneway = True

    node_id: bytes
    tcp_address: str


class SubscribeLogs(RayletMessage):
    """A driver on another node wants its job's worker output from this node too."""

    op = "subscribe_logs"
    sent_by = "core worker (driver)"
    oneway = True

    job_id: bytes | None = OMIT


# -- introspection -------------------------------------------------------------------------
class NodeStats(RayletMessage):
    op = "node_stats"
    sent_by = "dashboard agent, core worker (ember.nodes), tests"
    reply = (
        '{"transfers", "transfers_seq", "node_id", "pid", "gcs_pid", "resources_total", '
        '"resources_available", "store", "num_workers", "recent_exits": [[pid, reason, '
        'intended]], "memory_monitor": {"enabled", "threshold", "used_bytes", "total_bytes", '
        '"kills_total", "kills_seq", "kills": [...]}, ...}'
    )

    transfers_after: int = OMIT  # only transfers logged after this sequence number
    oom_kills_after: int = OMIT  # only memory-monitor kills after this sequence number


class CollectReferences(RayletMessage):
    """Every local process's reference table (``ember memory``)."""

    op = "collect_references"
    sent_by = "dashboard agent"
    reply = (
        '{"node_id": str, "node_ip": str, "store": dict, "processes": list[get_references '
        'reply], "unanswered": int}'
    )


class Shutdown(RayletMessage):
    op = "shutdown"
    sent_by = "tools"
    reply = '{"ok": True}'


class Ping(RayletMessage):
    op = "ping"
    sent_by = "tools"
    reply = '"pong"'
