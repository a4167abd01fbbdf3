"""What the raylet's lease machine (lease_machine.py) keeps: its workers and their lifecycle,
the lease requests waiting in its queue, and the leases it granted. Plain records with no
behaviour beyond their fields.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from ember.lifecycle import Lifecycle, LifecycleState, Track
from ember.resources import of_resource

# The actor lease of a host of shared-process actors names this key, not an actor: its first
# bytes say so wherever a worker's actor_id is shown (a host holds many actors, not one).
HOST_KEY_PREFIX = b"ember-host:"


def is_host_key(actor_id: bytes | None) -> bool:
    return actor_id is not None and actor_id.startswith(HOST_KEY_PREFIX)


class WorkerState(LifecycleState):
    STARTING = "STARTING"  # process started, not yet registered with the raylet
    IDLE = "IDLE"  # registered, free for the next lease
    LEASED = "LEASED"  # runs a task holder's tasks
    ACTOR = "ACTOR"  # hosts an actor; never goes back to the pool
    CHECKING = "CHECKING"  # idle too long: asked whether it owns objects still in use
    EXITING = "EXITING"  # told to exit (killed or retired); waiting to see its process end
    DEAD = "DEAD"  # its process has exited


W = WorkerState
WORKER_LIFECYCLE: Lifecycle[WorkerState] = Lifecycle(
    "worker",
    {
        W.STARTING: {"registered": W.IDLE, "start_failed": W.DEAD, "kill": W.EXITING},
        W.IDLE: {
            "leased": W.LEASED,
            "actor": W.ACTOR,
            "idle_timeout": W.CHECKING,
            "kill": W.EXITING,
            "died": W.DEAD,
        },
        W.LEASED: {"returned": W.IDLE, "kill": W.EXITING, "died": W.DEAD},
        W.ACTOR: {"kill": W.EXITING, "died": W.DEAD},
        W.CHECKING: {
            "may_exit": W.EXITING,
            "must_stay": W.IDLE,
            "kill": W.EXITING,
            "died": W.DEAD,
        },
        # Killed before it registered: its late registration changes nothing.
        W.EXITING: {"kill": W.EXITING, "registered": W.EXITING, "died": W.DEAD},
    },
)


class Worker:
    """What the lease machine knows of one worker. The pool's ``WorkerProc`` adds the
    process, its pid and its connection."""

    __slots__ = (
        "worker_id",
        "track",
        "lease_id",
        "job_id",
        "actor_id",
        "title",
        "blocked",
        "tasks_run",
        "idle_since",
        "depth",
        "env",
    )

    def __init__(self, worker_id: bytes, now: float) -> None:
        self.worker_id = worker_id
        self.track: Track[WorkerState] = WORKER_LIFECYCLE.track(worker_id.hex()[:12], W.STARTING)
        self.lease_id: int | None = None
        self.job_id: bytes | None = None
        self.actor_id: bytes | None = None
        self.title = ""
        self.blocked = False  # its task waits in get(): its CPU is lent to others
        self.tasks_run = 0
        self.idle_since = now
        self.depth = 0  # the nesting depth of the lease it runs (its request's)
        # The runtime_env it is kept for ("": the common pool): a worker runs the tasks of
        # one runtime_env only, as in Ray, so nothing one env set up leaks into another's.
        self.env = ""

    @property
    def state(self) -> WorkerState:
        return self.track.state


class ViewCheck(Enum):
    """Whether a request about to fail asked the GCS for a fresh view first."""

    NOT_ASKED = 1
    PENDING = 2
    DONE = 3


# Marks the env key of work that asks for GPUs (Request.env): such work has workers of its own.
GPU_WORKERS = "|gpu"
# Then the job's id: each job has workers of its own.
JOB_WORKERS = "|job:"


class Request:
    """One lease request waiting for a worker. ``reply`` is the shell's handle for answering
    it (a future); the machine only passes it back in instructions."""

    __slots__ = (
        "reply",
        "shape",
        "strategy",
        "client",
        "job_id",
        "name",
        "since",
        "warned",
        "actor_id",
        "spilled",
        "view_check",
        "retriable",
        "depth",
        "env",
        "request_id",
        "wait_for_room",
    )

    def __init__(
        self,
        reply: Any,
        shape: dict[str, float],
        strategy: Any,
        client: Any,
        job_id: bytes | None,
        name: str,
        actor_id: bytes | None = None,
        spilled: int = 0,
        retriable: bool = False,
        depth: int = 1,
        env: str = "",
        request_id: int | None = None,
        wait_for_room: bool = False,
    ) -> None:
        self.reply = reply
        self.shape = shape
        self.strategy = strategy
        self.client = client  # the holder's connection; None for actor leases (the GCS's)
        self.job_id = job_id
        self.name = name
        self.since = 0.0  # set when the machine queues it
        self.warned = False
        self.actor_id = actor_id
        self.spilled = spilled  # how many raylets sent it on before this one (scheduling.py)
        self.view_check = ViewCheck.NOT_ASKED
        # Its work may run again if the memory monitor kills it (max_retries / restarts left).
        self.retriable = retriable
        # How deep its tasks nest: 1 for a driver's, one more than the requesting worker's
        # lease for a task's. The queue serves deeper requests first (see LeaseMachine).
        self.depth = depth
        # Its runtime_env's key ("": none): only such a worker runs it. Work that asks for
        # GPUs keeps workers of its own too, as in Ray: a CUDA context a GPU task left in its
        # process (and the GPU memory it holds) never follows a CPU task there.
        # And, as in Ray, a worker runs one job's work only: module state one driver's
        # tasks leave never meets another's.
        self.env = env + GPU_WORKERS if of_resource(shape, "GPU") else env
        if job_id:
            self.env += JOB_WORKERS + job_id.hex()
        self.request_id = request_id  # the client's number for it (cancel_lease_request)
        # An actor lease the GCS sent because no node had room (LeaseMachine._dispatch): it
        # waits here for this node's task leases to come back, while no other node has room.
        self.wait_for_room = wait_for_room


class Lease:
    __slots__ = (
        "lease_id",
        "worker",
        "shape",
        "gpu_ids",
        "client",
        "released",
        "is_actor",
        "retriable",
        "granted_at",
    )

    def __init__(
        self,
        lease_id: int,
        worker: Worker,
        shape: dict[str, float],
        gpu_ids: list[int],
        client: Any,
        is_actor: bool,
        retriable: bool = False,
        granted_at: float = 0.0,
    ) -> None:
        self.lease_id = lease_id
        self.worker = worker
        self.shape = shape
        self.gpu_ids = gpu_ids
        self.client = client
        self.released = False  # CPU handed back while the worker is blocked in get()
        self.is_actor = is_actor
        self.retriable = retriable  # the memory monitor kills retriable work first
        self.granted_at = granted_at  # ... and, of that, the newest first
