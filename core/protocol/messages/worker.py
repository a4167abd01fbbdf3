"""Messages a core worker handles (``ember.core_worker.core_worker``, in every driver and
worker process; its listener is the ``address`` it registered with its raylet).

Senders: other core workers (tasks, object lookups, borrowing), the GCS (actor creation and
updates, exit, node events), its raylet (logs, warnings, reference collection). Ids are raw
``bytes``; an "owner" is ``(worker_id, address)``; an object "location" is
``("inline", meta, data, buffers)`` or ``("plasma", node_id, ...)``, a stored error being an
inline value whose meta says so. A task reply is
``{"returns": list[location], "contained": list, "error"?: True, "worker_exiting"?: True}``
with where and when it ran (``timings``, ``pid``, ``node_id``, ``worker_id``), which its
owner's end event carries to the dashboard.
"""

from __future__ import annotations

from typing import Any

from ember.protocol.messages.base import OMIT, Catalogue, Message

WORKER = Catalogue("worker", "ember.core_worker.core_worker.CoreWorker")


class WorkerMessage(Message):
    catalogue = WORKER


# -- tasks (the hot path: the body is the spec's fields, a dict) ---------------------------
class PushTask(WorkerMessage):
    """Run a normal task on this leased worker; answered when it has run."""

    op = "push_task"
    sent_by = "core worker (task submitter, the lease holder)"
    reply = "task reply"
    body_is = "spec"

    spec: Any  # TaskSpec.to_wire() of a TaskSpec (ember.core_worker.task_spec), NORMAL_TASK


class PushActorTask(WorkerMessage):
    """Run an actor method; calls from one caller run in their sequence order."""

    op = "push_actor_task"
    sent_by = "core worker (actor submitter, a handle's holder)"
    reply = "task reply"
    body_is = "spec"

    spec: Any  # TaskSpec.to_wire() of a TaskSpec, kind ACTOR_TASK


class ServeOnThread(WorkerMessage):
    """The first request on a caller's own channel (``reply_channel.py``): may the thread
    that runs this worker's calls read this connection itself (``served_channels.py``)? The
    caller sends nothing more until answered."""

    op = "serve_on_thread"
    sent_by = "core worker (a driver thread's own channel to an actor or a leased worker)"
    reply = "bool: True, the executing thread reads the connection from now on"


class CreateActor(WorkerMessage):
    """Run an actor's constructor on the worker leased for it."""

    op = "create_actor"
    sent_by = "GCS"
    reply = "task reply (an error reply: the constructor failed)"
    body_is = "spec"

    spec: Any  # TaskSpec, kind ACTOR_CREATION_TASK


class CancelTask(WorkerMessage):
    op = "cancel_task"
    sent_by = "core worker (ember.cancel, by the task's submitter)"
    oneway = True

    task_id: bytes
    force: bool = OMIT  # kill the worker rather than interrupt the task
    recursive: bool = OMIT  # False: leave the tasks it submitted running (default True)


class CancelForBorrower(WorkerMessage):
    """A process cancelled a ref it borrows (returned to it by another task): its owner, the
    task's submitter, cancels the task that makes it (Ray forwards the cancel the same way)."""

    op = "cancel_for_borrower"
    sent_by = "core worker (ember.cancel of a borrowed ref)"
    oneway = True

    object_id: bytes
    force: bool = OMIT
    recursive: bool = OMIT


class GetFunction(WorkerMessage):
    """The pickled function of a task whose spec did not carry it (the worker has not seen
    it yet and the submitter sent only its id)."""

    op = "get_function"
    sent_by = "core worker (executor)"
    reply = "bytes | None"

    function_id: bytes


class GeneratorItem(WorkerMessage):
    """An item a generator task yielded, for its caller (who owns it); an attempt's items
    all come before its reply, on the connection the task was pushed on."""

    op = "generator_item"
    sent_by = "core worker (executor, running a streaming or dynamic generator task)"
    oneway = True

    task_id: bytes
    index: int  # 0-based: object index + 2 of the task (1 is its own return)
    loc: Any  # location
    contained: Any  # [(object_id, owner)] of refs inside the item, or None
    dynamic: bool = OMIT  # a num_returns="dynamic" task's item (no stream)


# -- objects and references ----------------------------------------------------------------
class GetObject(WorkerMessage):
    """Where an object this process owns is; answered once it is ready."""

    op = "get_object"
    sent_by = "core worker (a borrower)"
    reply = "location (a lost or freed object: an inline ObjectLostError)"

    object_id: bytes


class AddBorrower(WorkerMessage):
    op = "add_borrower"
    sent_by = "core worker (one that received a reference)"
    reply = "list[bool] (per object: whether the owner still had it)"

    object_ids: list[bytes]
    borrower: bytes  # worker id


class RemoveBorrower(WorkerMessage):
    op = "remove_borrower"
    sent_by = "core worker"
    oneway = True

    object_id: bytes
    borrower: bytes
    count: int = OMIT


class AddLocation(WorkerMessage):
    """A copy of an object this process owns now exists on ``node_id``."""

    op = "add_location"
    sent_by = "core worker (one that pulled a copy)"
    oneway = True

    object_id: bytes
    node_id: bytes


class GetReferences(WorkerMessage):
    """This process's reference table (``ember memory``)."""

    op = "get_references"
    sent_by = "raylet (collect_references)"
    reply = '{"pid": int, "worker_id": str, "is_driver": bool, "actor": str, "rows": list}'


# -- peers, actors and lifetime ------------------------------------------------------------
class Hello(WorkerMessage):
    """The first message on a worker-to-worker connection: who is calling."""

    op = "hello"
    sent_by = "core worker"
    oneway = True

    worker_id: bytes


class ActorUpdate(WorkerMessage):
    """An actor's state changed (or its current state, on subscribing)."""

    op = "actor_update"
    sent_by = "GCS (to subscribe_actor subscribers)"
    oneway = True
    body_is = "info"

    info: dict[str, Any]  # ActorInfo.public(): actor_id, state, address, death_cause, ...


class Exit(WorkerMessage):
    """End this actor's worker: after its queued calls, or at once with ``force``."""

    op = "exit"
    sent_by = "GCS"
    oneway = True

    reason: str = OMIT
    force: bool = OMIT
    actor_id: bytes = OMIT  # in a host of shared-process actors: only this one ends


class DropActor(WorkerMessage):
    """Drop one shared-process actor from its host now (``ember.kill``, its job's end): its
    queued calls fail; True once it is gone. The GCS kills the host if no answer comes."""

    op = "drop_actor"
    sent_by = "GCS, raylet"
    reply = "True"

    actor_id: bytes
    reason: str = OMIT


class MayExit(WorkerMessage):
    """May this idle worker be stopped (it owns no objects others may still need)?"""

    op = "may_exit"
    sent_by = "raylet (idle worker reaping)"
    reply = "bool"


class WorkerOomKilled(WorkerMessage):
    """The memory monitor is about to kill a worker this process leased: which task runs on
    it, and will it run again? The owner then fails it with OutOfMemoryError or retries it
    when the worker's connection closes."""

    op = "worker_oom_killed"
    sent_by = "raylet (memory monitor)"
    reply = '{"task_id": bytes, "name": str, "retry": bool} | None (no task running on it)'

    worker_id: bytes
    detail: str  # the node, its usage and threshold, the biggest users, what to do
    retry: bool  # the raylet's leave: its caller has other tasks running on the node


class CollectGarbage(WorkerMessage):
    """The node's object store is under pressure (it spills, or a create waits for room):
    run the garbage collector, so objects only reference cycles keep alive are freed (Ray's
    global GC; at most once per ``config.object_store_gc_interval_s``)."""

    op = "collect_garbage"
    sent_by = "raylet (its object store needs room)"
    oneway = True


class LeasesWanted(WorkerMessage):
    """A lease request waits on the raylet for resources these task leases (granted to this
    process) hold: return each as soon as it is idle, rather than keeping it for a next
    task."""

    op = "leases_wanted"
    sent_by = "raylet (a lease request waits for resources, or its node drains)"
    oneway = True

    lease_ids: list[int]
    # The node drains: return each lease once idle even if more tasks of its class wait
    # (they get a lease elsewhere), not only when none does.
    draining: bool = OMIT


class NodeDead(WorkerMessage):
    op = "node_dead"
    sent_by = "GCS (to subscribe_node_events subscribers)"
    oneway = True

    node_id: bytes
    reason: str = OMIT
    drained: bool = OMIT  # it was draining: it left as planned (a scale-down)


class NodeAdded(WorkerMessage):
    op = "node_added"
    sent_by = "GCS (to subscribe_node_events subscribers)"
    oneway = True

    node_id: bytes
    tcp_address: str


# -- output for the driver -----------------------------------------------------------------
class LogLines(WorkerMessage):
    """Worker output for the driver to print (``log_to_driver``)."""

    op = "log_lines"
    sent_by = "raylet (log forwarder)"
    oneway = True

    pid: int
    title: str
    stream: str  # "out" or "err"
    lines: list[str]
    node_ip: str


class DriverWarning(WorkerMessage):
    """Something the driver's user should see (an infeasible task)."""

    op = "warning"
    sent_by = "raylet"
    oneway = True

    message: str
    kind: str = OMIT
