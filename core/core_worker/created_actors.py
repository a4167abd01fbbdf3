"""The actors this process created: their handle count, and their end when it reaches zero.

An actor's handles count as references to a synthetic object its creator owns
(``ids.actor_handle_object_id``); when the reference counter frees that object, the actor's
last handle anywhere is gone and the creator asks the GCS to end it, after the calls this
process still has pending on it. Detached actors are exempt: they live until killed. A named
actor is not (Ray 2.x): it ends with its creator's handles, and its name is free again. The
arguments of an actor's constructor stay held until the GCS reports it alive (or dead).
"""

from __future__ import annotations

from typing import Any, Protocol

from ember.core_worker.reference_counter import ReferenceCounter
from ember.core_worker.task_spec import TaskSpec
from ember.gcs_link import GcsLink
from ember.ids import actor_handle_object_id
from ember.protocol.connection import Connection


class _ActorSubmitter(Protocol):
    def end_after_calls(self, actor_id: bytes) -> bool: ...
    def on_actor_update(self, info: dict[str, Any]) -> None: ...


class CreatedActorsHost(Protocol):
    """What the created-actors table needs of the rest of the core worker."""

    owner_address: Any
    gcs: GcsLink
    actor_submitter: _ActorSubmitter

    def call_gcs_sync(self, op: str, body: Any, timeout: float | None = None) -> Any: ...
    def record_event(self, spec: TaskSpec, state: str, **extra: Any) -> None: ...


class CreatedActors:
    def __init__(self, host: CreatedActorsHost, refs: ReferenceCounter) -> None:
        self.host = host
        self.refs = refs
        self._handle_objects: dict[bytes, bytes] = {}  # {handle object id: actor id}
        # Actors created here that outlive their handles (detached).
        self._unscoped_actors: set[bytes] = set()
        self._creation_holds: dict[bytes, list] = {}  # {actor_id: argument refs held}
        # Creation tasks not run yet: {actor_id: spec}. The worker that runs one records its
        # RUNNING and its end; an actor that dies first ends its creation task here.
        self._creation_specs: dict[bytes, TaskSpec] = {}

    def own_handle_object(self, actor_id: bytes) -> None:
        """A new actor created here: its handle object, whose count is the actor's handle
        count, is owned here; when it is freed the actor ends (``out_of_scope``)."""
        handle_oid = actor_handle_object_id(actor_id)
        self._handle_objects[handle_oid] = actor_id
        self.refs.add_owned(handle_oid, self.host.owner_address)
        self.refs.mark_actor_handle(handle_oid)

    def out_of_scope(self, handle_object_id: bytes) -> None:
        """On the I/O thread: the actor's last handle anywhere is gone."""
        actor_id = self._handle_objects.pop(handle_object_id, None)
        if actor_id is None or self.host.gcs is None or self.host.gcs.closed:
            return
        if actor_id in self._unscoped_actors:
            return
        # Calls this process already made still run: the actor ends after them.
        if self.host.actor_submitter.end_after_calls(actor_id):
            return
        self.host.gcs.send(
            "kill_actor",
            {
                "actor_id": actor_id,
                "no_restart": True,
                "graceful": True,
                "reason": "all references to the actor were removed",
                "only_if_not_detached": True,
            },
        )

    def create(self, spec: TaskSpec, held: list, unscoped: bool = False) -> None:
        """Registers the actor with the GCS (a taken name fails here) and lets it place it."""
        if unscoped:
            self._unscoped_actors.add(spec.actor_id)
        if held:
            self._creation_holds[spec.actor_id] = held
        host = self.host
        extra = {"name": spec.display_name(), "actor_id": spec.actor_id}
        host.record_event(spec, "PENDING_ARGS_AVAIL", **extra)
        self._creation_specs[spec.actor_id] = spec
        try:
            host.call_gcs_sync("create_actor", spec)
        except BaseException as e:
            del self._creation_specs[spec.actor_id]
            host.record_event(spec, "FAILED", error=str(e), error_type="ACTOR_CREATION_FAILED")
            raise
        host.record_event(spec, "PENDING_NODE_ASSIGNMENT")  # the GCS places it

    def release_creation_hold(self, actor_id: bytes) -> None:
        held = self._creation_holds.pop(actor_id, None)
        if held:
            self.refs.remove_submitted(held)

    def h_actor_update(self, conn: Connection, info: dict) -> None:
        state = info["state"]
        if state in ("ALIVE", "DEAD"):
            actor_id = info["actor_id"]
            if actor_id in self._creation_holds:
                self.release_creation_hold(actor_id)
            spec = self._creation_specs.pop(actor_id, None)
            if spec is not None and state == "ALIVE":
                # The worker records the end too, with its times; this one does not depend
                # on that worker living to its next flush.
                self.host.record_event(spec, "FINISHED")
            elif spec is not None:
                # Dead before it was constructed (or its constructor raised: then the
                # worker's FAILED, with the traceback, is the one the table keeps).
                cause = info.get("death_cause") or "the actor died before it was created"
                self.host.record_event(
                    spec, "FAILED", error=f"{spec.display_name()}: {cause}", error_type="ACTOR_DIED"
                )
        self.host.actor_submitter.on_actor_update(info)
