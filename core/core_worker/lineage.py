"""Lineage reconstruction, as in Ray: re-running the task that made an object whose every
shared-memory copy died with its node.

The owner keeps the specs of finished normal tasks that returned shared-memory objects and
may still be retried, on cluster nodes only (on one node the store dies with everything
else). Only tasks without ref arguments are kept: their spec is all a re-run needs, whereas a
task with ref arguments would also need those arguments kept alive (Ray pins them; Ember
raises ``ObjectLostError`` for such results instead). Bounded by ``max_lineage_entries``,
oldest dropped first. The owner rebuilds when it reads the object itself (``reconstruct``)
and when a borrower asks it for one whose copies are all gone (``start_rebuild``: a task's
argument), answering that borrower once the value is back.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Protocol

from ember import config
from ember.core_worker.memory_store import MemoryStore
from ember.core_worker.task_spec import ACTOR_TASK, ARG_REF, TaskSpec
from ember.exceptions import GetTimeoutError
from ember.ids import task_id_of
from ember.serialization import deserialize

logger = logging.getLogger(__name__)


class _TaskSubmitter(Protocol):
    def resubmit(self, spec: TaskSpec) -> None: ...


class LineageHost(Protocol):
    """What lineage needs of the rest of the core worker."""

    node: dict[str, Any]
    memory_store: MemoryStore
    loop: asyncio.AbstractEventLoop
    task_submitter: _TaskSubmitter

    def owns(self, object_id: bytes) -> bool: ...
    def record_event(self, spec: TaskSpec, state: str, **extra: Any) -> None: ...
    def read_plasma(self, object_id: bytes, loc: tuple) -> tuple[int, Any]: ...


class Lineage:
    def __init__(self, host: LineageHost) -> None:
        self.host = host
        self.specs: dict[bytes, TaskSpec] = {}  # {task_id: spec}, oldest first

    def keep(self, spec: TaskSpec, returns: list) -> None:
        """After a task's reply: remember it if a node's death could lose its results."""
        if not self.host.node.get("token_file"):
            return
        if spec.kind == ACTOR_TASK or not any(loc[0] == "plasma" for loc in returns):
            return
        if any(a[0] == ARG_REF for a in spec.args):
            return
        specs = self.specs
        specs[spec.task_id] = spec
        if len(specs) > config.max_lineage_entries:
            del specs[next(iter(specs))]

    def forget(self, object_id: bytes) -> None:
        self.specs.pop(task_id_of(object_id), None)

    def _begin(self, object_id: bytes) -> TaskSpec | None:
        """The task to re-run for a lost object this process owns, its results reset to
        pending; None when there is none or its retries are spent."""
        host = self.host
        spec = self.specs.pop(task_id_of(object_id), None)
        if spec is None or not host.owns(object_id):
            return None
        if spec.max_retries != -1 and spec.attempt >= spec.max_retries:
            return None
        spec.attempt += 1
        for oid in spec.return_ids():
            host.memory_store.reset(oid)
        host.record_event(spec, "RETRYING")
        logger.warning(
            "object %s was lost; re-running %s() to rebuild it",
            object_id.hex()[:16],
            spec.display_name(),
        )
        return spec

    def start_rebuild(self, object_id: bytes) -> bool:
        """On the I/O thread, for a borrower that asked for a lost object (a task's argument
        whose copies died with a node): re-runs the task that made it, as Ray's owner does;
        the borrower's answer waits for the rebuilt value like that of any pending object.
        False when it cannot be rebuilt."""
        spec = self._begin(object_id)
        if spec is None:
            return False
        self.host.task_submitter.resubmit(spec)
        return True

    def reconstruct(self, object_id: bytes, timeout: float | None = None) -> tuple[int, Any] | None:
        """Re-runs the task that made a lost object this process owns (user thread); returns
        the rebuilt ``(meta, value)``, or None when it cannot. ``timeout``: the caller's get
        ends then with GetTimeoutError (the rebuild goes on; a later get waits for it)."""
        host = self.host
        spec = self._begin(object_id)
        if spec is None:
            return None
        done = threading.Event()
        box: list = []

        def on_ready(_oid: bytes, value: tuple) -> None:
            box.append(value)
            done.set()

        host.loop.call_soon_threadsafe(host.task_submitter.resubmit, spec)
        host.memory_store.on_ready(object_id, on_ready)
        limit = config.reconstruction_timeout
        if not done.wait(limit if timeout is None else min(timeout, limit)):
            host.memory_store.remove_waiter(object_id, on_ready)
            if timeout is not None and timeout < limit:
                raise GetTimeoutError(
                    f"get() timed out after its timeout while the lost object "
                    f"{object_id.hex()} was being rebuilt (re-running {spec.display_name()}())"
                )
            return None
        loc = box[0]
        if loc[0] == "inline":
            return loc[1], deserialize(loc[2], loc[3])
        return host.read_plasma(object_id, loc)
