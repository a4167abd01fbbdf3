"""What the lease machine (lease_machine.py) hears and says: the events its I/O shell feeds
it and the instructions it returns. Plain records; none does anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.records import Record

if TYPE_CHECKING:
    from ember.raylet.lease_records import Lease, Request, Worker


# -- events ---------------------------------------------------------------------------------
class WorkerStarted(Record):
    """A worker the shell started on its own (prestart), not for ``StartWorkers``."""

    worker: Worker


class WorkerNotStarted(Record):
    """Starting one of the workers ``StartWorkers`` asked for failed before any process
    existed."""


class WorkerRegistered(Record):
    worker: Worker


class WorkersExited(Record):
    """Processes seen to have exited, all at once: none may be leased while others are
    still being accounted for."""

    workers: list[Worker]


class LeaseRequested(Record):
    request: Request


class LeaseReturned(Record):
    """The holder is done with the worker; it goes back to the pool if it can (an actor's
    worker cannot: it is killed, for ``reason``)."""

    lease_id: int
    reason: str = ""


class LeaseEnded(Record):
    """The lease ends and its worker is killed (after ``grace`` seconds if it is still
    there then)."""

    lease_id: int
    reason: str
    grace: float = 0.0


class WorkerBlocked(Record):
    worker: Worker


class WorkerUnblocked(Record):
    worker: Worker


class KillRequested(Record):
    """Someone (the GCS, for an actor) wants a worker gone, leased or not."""

    worker: Worker
    reason: str
    grace: float = 0.0


class ClientGone(Record):
    """A lease holder's connection closed: its requests and task leases end."""

    client: Any


class BacklogReported(Record):
    """A client's tasks of one class waiting beyond its requests (0: none now)."""

    client: Any
    class_id: int
    shape: dict
    backlog: int


class RequestWithdrawn(Record):
    """A client's waiting request (by its number) is no longer wanted."""

    client: Any
    request_id: int


class JobFinished(Record):
    job_id: bytes


class GroupRemoved(Record):
    """A placement group's bundles are released: workers running in it lose their room.
    ``markers``: only the leases asking for one of these resource names (some bundles'
    ``bundle_group_<i>_<pg>``); None: every lease in the group."""

    pg_hex: str
    markers: frozenset[str] | None = None


class ResourcesChanged(Record):
    """Capacity was added or taken (bundles, ``set_resource``): try the queue again."""


class ViewChanged(Record):
    """The cluster view was replaced."""


class ViewRefreshed(Record):
    """The fresh view asked for by ``RefreshView`` arrived (or could not be had)."""


class Tick(Record):
    """Periodic: warn about requests no node can run, retire surplus idle workers."""

    idle_after: float  # seconds idle before a surplus worker is asked to exit
    warn_after: float  # seconds a request waits before it can be called infeasible


class CheckAnswered(Record):
    worker: Worker
    may_exit: bool


class NodeDeclaredDead(Record):
    """The GCS gave up on this node: its work was redone elsewhere. It joins again as
    ``new_node_id``."""

    new_node_id: bytes


class ShuttingDown(Record):
    pass


# -- instructions ---------------------------------------------------------------------------
class StartWorkers(Record):
    """Start ``count`` workers. The machine counts them as starting from now on, so a
    second pass in the same event does not ask for them again."""

    count: int


class Grant(Record):
    request: Request
    lease: Lease


class Spillback(Record):
    request: Request
    node_id: bytes
    address: str


class Unschedulable(Record):
    request: Request
    message: str


class Cancel(Record):
    """The request's holder is gone: answer it with nothing."""

    request: Request


class WarnInfeasible(Record):
    request: Request
    message: str


class RefreshView(Record):
    pass


class KillWorker(Record):
    worker: Worker
    reason: str
    grace: float = 0.0  # kill only if it has not exited this many seconds later


class RetireWorker(Record):
    """Ask an idle worker to exit (SIGTERM): it owns nothing anyone still uses."""

    worker: Worker


class AskMayExit(Record):
    worker: Worker


class ActorWorkerDied(Record):
    """Tell the GCS: the actor on this worker is gone."""

    worker: Worker


class StartFailed(Record):
    worker: Worker


class AskLeasesBack(Record):
    """A request waits for resources that granted task leases hold: ask their holders to
    return each lease as soon as it is idle (a holder keeps an idle lease a moment, for
    its next task, which here would keep the waiting request from the CPU)."""

    leases: list[Lease]
    draining: bool = False  # the node drains: each lease back even if its holder has more
