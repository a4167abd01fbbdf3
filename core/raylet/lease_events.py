"""What the lease machine (lease_machine.py) hears and says: the events its I/O shell feeds
it and the instructions it returns. Plain records; none does anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.raylet.lease_machine import Lease, Request, Worker


# -- events ---------------------------------------------------------------------------------
@dataclass(slots=True)
class WorkerStarted:
    """A worker the shell started on its own (prestart), not for ``StartWorkers``."""

    worker: Worker


@dataclass(slots=True)
class WorkerNotStarted:
    """Starting one of the workers ``StartWorkers`` asked for failed before any process
    existed."""


@dataclass(slots=True)
class WorkerRegistered:
    worker: Worker


@dataclass(slots=True)
class WorkersExited:
    """Processes seen to have exited, all at once: none may be leased while others are
    still being accounted for."""

    workers: list[Worker]


@dataclass(slots=True)
class LeaseRequested:
    request: Request


@dataclass(slots=True)
class LeaseReturned:
    """The holder is done with the worker; it goes back to the pool if it can (an actor's
    worker cannot: it is killed, for ``reason``)."""

    lease_id: int
    reason: str = ""


@dataclass(slots=True)
class LeaseEnded:
    """The lease ends and its worker is killed (after ``grace`` seconds if it is still
    there then)."""

    lease_id: int
    reason: str
    grace: float = 0.0


@dataclass(slots=True)
class WorkerBlocked:
    worker: Worker


@dataclass(slots=True)
class WorkerUnblocked:
    worker: Worker


@dataclass(slots=True)
class KillRequested:
    """Someone (the GCS, for an actor) wants a worker gone, leased or not."""

    worker: Worker
    reason: str
    grace: float = 0.0


@dataclass(slots=True)
class ClientGone:
    """A lease holder's connection closed: its requests and task leases end."""

    client: Any


@dataclass(slots=True)
class JobFinished:
    job_id: bytes


@dataclass(slots=True)
class GroupRemoved:
    """A placement group's bundles are released: workers running in it lose their room."""

    pg_hex: str


@dataclass(slots=True)
class ResourcesChanged:
    """Capacity was added or taken (bundles, ``set_resource``): try the queue again."""


@dataclass(slots=True)
class ViewChanged:
    """The cluster view was replaced."""


@dataclass(slots=True)
class ViewRefreshed:
    """The fresh view asked for by ``RefreshView`` arrived (or could not be had)."""


@dataclass(slots=True)
class Tick:
    """Periodic: warn about requests no node can run, retire surplus idle workers."""

    idle_after: float  # seconds idle before a surplus worker is asked to exit
    warn_after: float  # seconds a request waits before it can be called infeasible


@dataclass(slots=True)
class CheckAnswered:
    worker: Worker
    may_exit: bool


@dataclass(slots=True)
class NodeDeclaredDead:
    """The GCS gave up on this node: its work was redone elsewhere. It joins again as
    ``new_node_id``."""

    new_node_id: bytes


@dataclass(slots=True)
class ShuttingDown:
    pass


# -- instructions ---------------------------------------------------------------------------
@dataclass(slots=True)
class StartWorkers:
    """Start ``count`` workers. The machine counts them as starting from now on, so a
    second pass in the same event does not ask for them again."""

    count: int


@dataclass(slots=True)
class Grant:
    request: Request
    lease: Lease


@dataclass(slots=True)
class Spillback:
    request: Request
    node_id: bytes
    address: str


@dataclass(slots=True)
class Unschedulable:
    request: Request
    message: str


@dataclass(slots=True)
class Cancel:
    """The request's holder is gone: answer it with nothing."""

    request: Request


@dataclass(slots=True)
class WarnInfeasible:
    request: Request
    message: str


@dataclass(slots=True)
class RefreshView:
    pass


@dataclass(slots=True)
class KillWorker:
    worker: Worker
    reason: str
    grace: float = 0.0  # kill only if it has not exited this many seconds later


@dataclass(slots=True)
class RetireWorker:
    """Ask an idle worker to exit (SIGTERM): it owns nothing anyone still uses."""

    worker: Worker


@dataclass(slots=True)
class AskMayExit:
    worker: Worker


@dataclass(slots=True)
class ActorWorkerDied:
    """Tell the GCS: the actor on this worker is gone."""

    worker: Worker


@dataclass(slots=True)
class StartFailed:
    worker: Worker
