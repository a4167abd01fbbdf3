"""Normal tasks: lease workers from the raylet per scheduling class, push tasks straight to them.

Runs on the core worker's I/O thread only. A scheduling class is the resource shape plus the
scheduling strategy; tasks of one class share leases. A leased worker runs one task at a time
(pipelining could queue a task behind one blocked in ``get`` on its result, a deadlock), and
an idle lease is kept for ``lease_idle_seconds`` so a loop of sync calls costs one round trip
to the worker per task, not two.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from ember import config
from ember.core_worker.task_spec import ARG_REF, TaskSpec
from ember.exceptions import TaskUnschedulableError
from ember.protocol.connection import Connection, ConnectionClosedError

if TYPE_CHECKING:
    from ember.core_worker.core_worker import CoreWorker

logger = logging.getLogger(__name__)

MAX_PENDING_LEASES_PER_CLASS = 16


class _Lease:
    __slots__ = (
        "lease_id",
        "worker_id",
        "address",
        "conn",
        "busy",
        "idle_handle",
        "raylet",
        "spec",
        "gpu_ids",
        "node_id",
    )

    def __init__(
        self, lease_id, worker_id, address, conn, raylet, gpu_ids=(), node_id=None
    ) -> None:
        self.gpu_ids = list(gpu_ids)
        self.node_id = node_id
        self.lease_id = lease_id
        self.worker_id = worker_id
        self.address = address
        self.conn: Connection = conn
        self.raylet: Connection = raylet
        self.busy = False
        self.idle_handle: asyncio.TimerHandle | None = None
        self.spec: TaskSpec | None = None  # the task it runs now


class _Class:
    __slots__ = ("key", "resources", "strategy", "queue", "idle", "leases", "pending_leases")

    def __init__(self, key, resources, strategy) -> None:
        self.key = key
        self.resources = resources
        self.strategy = strategy
        self.queue: deque[TaskSpec] = deque()
        self.idle: list[_Lease] = []
        self.leases: set[_Lease] = set()
        self.pending_leases = 0


class TaskSubmitter:
    def __init__(self, cw: CoreWorker) -> None:
        self.cw = cw
        self._classes: dict[Any, _Class] = {}
        self._running: dict[bytes, _Lease] = {}  # {task_id: lease running it}
        self._cancelled: set[bytes] = set()
        self._force_cancelled: set[bytes] = set()  # killed on purpose: not a crash to retry

    # -- entry -----------------------------------------------------------------------------
    def submit(self, spec: TaskSpec) -> None:
        """On the I/O thread: wait for owned arguments, then queue for a lease."""
        pending = [
            a[1]
            for a in spec.args
            if a[0] == ARG_REF
            and self.cw.owns(a[1])
            and not self.cw.memory_store.get_if_ready(a[1])
        ]
        if not pending:
            self._enqueue(spec)
            return
        remaining = {"n": len(pending)}

        def on_ready(_oid, _value) -> None:
            remaining["n"] -= 1
            if remaining["n"] == 0:
                self.cw.loop.call_soon_threadsafe(self._resolved, spec)

        for oid in pending:
            self.cw.memory_store.on_ready(oid, on_ready)

    def _resolved(self, spec: TaskSpec) -> None:
        self.cw.inline_small_args(spec)
        self._enqueue(spec)

    def _enqueue(self, spec: TaskSpec) -> None:
        if spec.task_id in self._cancelled:
            self._cancelled.discard(spec.task_id)
            self.cw.fail_task(spec, self.cw.cancelled_error(spec))
            return
        key = (tuple(sorted(spec.resources.items())), _strategy_key(spec.strategy))
        cls = self._classes.get(key)
        if cls is None:
            cls = self._classes[key] = _Class(key, spec.resources, spec.strategy)
        cls.queue.append(spec)
        self.cw.record_event(spec, "PENDING_NODE_ASSIGNMENT")
        self._pump(cls)

    # -- leases ----------------------------------------------------------------------------
    def _pump(self, cls: _Class) -> None:
        while cls.queue and cls.idle:
            lease = cls.idle.pop()
            if lease.idle_handle is not None:
                lease.idle_handle.cancel()
                lease.idle_handle = None
            self._push(cls, lease, cls.queue.popleft())
        wanted = len(cls.queue) - cls.pending_leases
        while wanted > 0 and cls.pending_leases < MAX_PENDING_LEASES_PER_CLASS:
            cls.pending_leases += 1
            wanted -= 1
            asyncio.ensure_future(self._request_lease(cls))

    async def _request_lease(self, cls: _Class) -> None:
        body = {
            "resources": cls.resources,
            "strategy": cls.strategy,
            "client": self.cw.worker_id,
            "job_id": self.cw.job_id,
            "name": cls.queue[0].function_name if cls.queue else "",
        }
        raylet = self.cw.raylet
        try:
            # Large arguments pull the work toward their data (Ray's locality-aware leasing).
            near = self.cw.links.locality_node(cls.queue[0]) if cls.queue else None
            if near is not None:
                raylet = await self.cw.links.raylet_for_node(near)
            for _ in range(8):  # each hop is a raylet that knows a better node
                grant = await raylet.call("request_lease", body)
                if not grant or "spillback" not in grant:
                    break
                target = grant["spillback"]
                raylet = await self.cw.links.raylet_for_node(target["node_id"], target["address"])
                body["spilled"] = True
        except Exception as e:
            cls.pending_leases -= 1
            if isinstance(e, OSError | TimeoutError) and not self.cw.raylet.closed:
                # Another node's raylet went away (or never answered): ask ours again; the
                # cluster view it spills by learns of the death within a heartbeat.
                logger.info("lease request to another node failed (%s); retrying here", e)
                self.cw.loop.call_later(0.1, self._pump, cls)
                return
            if self.cw.links.local_node_lost():
                return  # the driver fails everything pending, saying why (on_node_lost)
            self._fail_queue(cls, e)
            return
        cls.pending_leases -= 1
        if grant is None:  # the raylet gave up on the request (cancelled, shutting down)
            self._pump(cls)
            return
        if "error" in grant or "spillback" in grant:
            self._fail_queue(cls, TaskUnschedulableError(grant.get("error", "no node took it")))
            return
        lease_id, worker_id, address = grant["lease_id"], grant["worker_id"], grant["address"]
        try:
            conn = await self.cw.connect_to_worker(worker_id, address)
        except Exception as e:
            if self.cw.shutting_down:
                return  # the node is stopping: its workers are going away, say nothing
            logger.warning("could not reach leased worker %s: %s", address, e)
            if not raylet.closed:
                raylet.send("return_lease", {"lease_id": lease_id, "worker_died": True})
            self._pump(cls)
            return
        lease = _Lease(
            lease_id,
            worker_id,
            address,
            conn,
            raylet,
            grant.get("gpu_ids", ()),
            grant.get("node_id"),
        )
        cls.leases.add(lease)
        if cls.queue:
            self._push(cls, lease, cls.queue.popleft())
        else:
            self._return_lease(cls, lease)

    def _return_lease(self, cls: _Class, lease: _Lease, worker_died: bool = False) -> None:
        cls.leases.discard(lease)
        if lease in cls.idle:
            cls.idle.remove(lease)
        if not lease.raylet.closed:
            lease.raylet.send(
                "return_lease", {"lease_id": lease.lease_id, "worker_died": worker_died}
            )

    def _push(self, cls: _Class, lease: _Lease, spec: TaskSpec) -> None:
        lease.busy = True
        lease.spec = spec
        spec.gpu_ids = lease.gpu_ids
        self._running[spec.task_id] = lease
        self.cw.attach_function(spec, lease.conn)
        self.cw.record_event(spec, "SUBMITTED_TO_WORKER", worker_id=lease.worker_id)
        lease.conn.request_cb(
            "push_task", spec, lambda reply, exc: self._on_reply(cls, lease, spec, reply, exc)
        )

    def _on_reply(self, cls: _Class, lease: _Lease, spec: TaskSpec, reply, exc) -> None:
        lease.busy = False
        lease.spec = None
        self._running.pop(spec.task_id, None)
        if exc is not None:
            # The worker went away mid-task: the lease is gone; retry or fail the task.
            self._return_lease(cls, lease, worker_died=True)
            if spec.task_id in self._force_cancelled:
                self._force_cancelled.discard(spec.task_id)
                self.cw.fail_task(spec, self.cw.cancelled_error(spec))
            elif isinstance(exc, ConnectionClosedError):
                self.cw.on_worker_crashed(
                    spec, lease.worker_id, str(exc), self._retry, lease.raylet
                )
            else:
                self.cw.fail_task(spec, exc)
            self._pump(cls)
            return
        self.cw.handle_task_reply(spec, reply, self._retry)
        if reply.get("worker_exiting"):
            self._return_lease(cls, lease, worker_died=True)
            self._pump(cls)
            return
        if cls.queue:
            self._push(cls, lease, cls.queue.popleft())
            return
        cls.idle.append(lease)
        lease.idle_handle = self.cw.loop.call_later(
            config.lease_idle_seconds, self._idle_expired, cls, lease
        )

    def _idle_expired(self, cls: _Class, lease: _Lease) -> None:
        lease.idle_handle = None
        if lease in cls.idle and not lease.busy:
            self._return_lease(cls, lease)

    def _retry(self, spec: TaskSpec) -> None:
        self._enqueue(spec)

    def _fail_queue(self, cls: _Class, error: BaseException) -> None:
        while cls.queue:
            self.cw.fail_task(cls.queue.popleft(), error)

    # -- cancel ----------------------------------------------------------------------------
    def cancel(self, task_id: bytes, force: bool) -> bool:
        """Cancels a queued task, or interrupts (force: kills) the worker running it."""
        for cls in self._classes.values():
            for spec in cls.queue:
                if spec.task_id == task_id:
                    cls.queue.remove(spec)
                    self.cw.fail_task(spec, self.cw.cancelled_error(spec))
                    return True
        lease = self._running.get(task_id)
        if lease is not None:
            if force:
                self._force_cancelled.add(task_id)
            lease.conn.send("cancel_task", {"task_id": task_id, "force": force})
            return True
        # Not queued here yet (waiting for arguments): cancel when it gets here.
        self._cancelled.add(task_id)
        return False

    def on_node_dead(self, node_id: bytes) -> None:
        """A node was declared dead: its workers' tasks are lost even if their sockets stay
        open (a silent node), so close them; the replies fail and the tasks retry."""
        for cls in self._classes.values():
            for lease in list(cls.leases):
                if lease.node_id == node_id:
                    lease.conn.close(f"its node {node_id.hex()[:12]} died")

    def release_all(self) -> None:
        for cls in self._classes.values():
            for lease in list(cls.leases):
                if not lease.busy:
                    self._return_lease(cls, lease)

    def stats(self) -> dict[str, int]:
        return {
            "queued": sum(len(c.queue) for c in self._classes.values()),
            "leases": sum(len(c.leases) for c in self._classes.values()),
            "running": len(self._running),
        }


def _strategy_key(strategy: Any) -> Any:
    if strategy is None or isinstance(strategy, str):
        return strategy
    return repr(strategy)
