"""The errors Ember raises, with Ray's names importable as aliases.

A task's exception comes back on ``get`` as a ``TaskError`` that is also an instance of the
original exception's class, so ``except ValueError`` works as it does in modern Ray.
"""

from __future__ import annotations

import os
import traceback
from typing import Any


class EmberError(Exception):
    """The base of every error Ember raises."""


class TaskError(EmberError):
    """A task or actor method raised; carries the remote traceback.

    ``get`` raises an instance of a class derived from both ``TaskError`` and the user's
    exception class (see ``as_instanceof_cause``), so either can be caught.
    """

    def __init__(
        self,
        function_name: str,
        traceback_str: str,
        cause: BaseException | None = None,
        pid: int | None = None,
        ip: str | None = None,
        actor_repr: str | None = None,
    ) -> None:
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.pid = pid
        self.ip = ip
        self.actor_repr = actor_repr
        super().__init__(self._message())

    def _message(self) -> str:
        where = f" (pid={self.pid}, ip={self.ip})" if self.pid else ""
        who = f" {self.actor_repr}" if self.actor_repr else ""
        return f"{self.function_name}(){who}{where} failed:\n{self.traceback_str}"

    def __str__(self) -> str:
        return self._message()

    def as_instanceof_cause(self) -> TaskError:
        """Returns an error that is both a TaskError and an instance of the cause's class."""
        cause_cls = type(self.cause) if self.cause is not None else None
        # A cause whose class TaskError already is (Exception, BaseException) needs no mix:
        # ``type(err) is RayTaskError`` holds for ``raise Exception(...)``, as on Ray.
        if (
            cause_cls is None
            or issubclass(cause_cls, TaskError)
            or issubclass(TaskError, cause_cls)
        ):
            return self
        try:
            dual = _dual_class(cause_cls)
            err = dual.__new__(dual)
            # Initialise both sides without calling the user's __init__, whose signature we
            # cannot know; copy the cause's state so attribute access still works.
            err.__dict__.update(getattr(self.cause, "__dict__", {}))
            TaskError.__init__(
                err,
                self.function_name,
                self.traceback_str,
                self.cause,
                self.pid,
                self.ip,
                self.actor_repr,
            )
            err.args = getattr(self.cause, "args", ())
            return err
        except TypeError:
            # Some builtin classes cannot be mixed in (layout conflicts): plain TaskError.
            return self

    def __reduce__(self):
        return (
            TaskError,
            (
                self.function_name,
                self.traceback_str,
                self.cause,
                self.pid,
                self.ip,
                self.actor_repr,
            ),
        )


_dual_classes: dict[type, type] = {}


def _dual_class(cause_cls: type) -> type:
    cls = _dual_classes.get(cause_cls)
    if cls is None:

        def __str__(self: Any) -> str:
            return TaskError._message(self)

        def __repr__(self: Any) -> str:
            return f"{type(self).__name__}({self.cause!r})"

        # Ray's name: "RayTaskError(ValueError)" is what a user's traceback and repr() show,
        # and what they search for; the class is still a TaskError and a ValueError.
        cls = type(
            f"RayTaskError({cause_cls.__name__})",
            (TaskError, cause_cls),
            {"__str__": __str__, "__repr__": __repr__, "__module__": __name__},
        )
        _dual_classes[cause_cls] = cls
    return cls


def format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


_EMBER_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def format_user_exception(exc: BaseException) -> str:
    """``exc``'s traceback without Ember's own frames (the executor, ``get``), as Ray shows a
    task's error: the user's frames only; all of them when every frame is Ember's."""
    shown = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    seen: set[int] = set()
    part: traceback.TracebackException | None = shown
    while part is not None and id(part) not in seen:  # the chain of causes, once each
        seen.add(id(part))
        users = [f for f in part.stack if not f.filename.startswith(_EMBER_DIR)]
        if users:
            part.stack = traceback.StackSummary.from_list(users)
        part = part.__cause__ or part.__context__
    return "".join(shown.format())


class WorkerCrashedError(EmberError):
    """The worker running the task died (exit, signal, out of memory) and retries ran out."""


class ActorError(EmberError):
    """Base of actor failures."""


class ActorDiedError(ActorError):
    """The actor is dead: killed, exited, crashed past max_restarts, or its owner died."""

    def __init__(self, actor_id: str = "", cause: str = "the actor died") -> None:
        self.actor_id = actor_id
        self.cause = cause
        # Ray's wording, which users match on ("The actor died unexpectedly", "The actor is
        # dead because it was killed by `ray.kill`"), with the cause in Ember's words.
        super().__init__(
            "The actor died unexpectedly before finishing this task.\n"
            f"\tactor_id: {actor_id}\n"
            f"The actor is dead because {cause}"
        )

    def __reduce__(self):
        return (ActorDiedError, (self.actor_id, self.cause))


class ActorUnavailableError(ActorError):
    """The actor's worker died under this call and the actor is restarting: the call is lost
    (unless ``max_task_retries`` retries it), later calls go to the restarted actor. Ray
    raises this class, not ActorDiedError, for a call lost to a restart."""

    def __init__(self, actor_id: str = "", cause: str = "the actor is restarting") -> None:
        self.actor_id = actor_id
        self.cause = cause
        super().__init__(
            f"Actor {actor_id} died before finishing this call and is restarting: {cause}"
        )

    def __reduce__(self):
        return (ActorUnavailableError, (self.actor_id, self.cause))


class ActorExit(SystemExit):
    """Raised by ``ember.actor.exit_actor()``: the actor's worker ends it after the current
    call. A SystemExit so that user code catching Exception does not swallow it."""

    def __init__(self, code: int = 0, reason: str = "exit_actor() was called") -> None:
        super().__init__(code)
        self.reason = reason


def exit_cause(e: SystemExit, call: str) -> str:
    """What ended an actor in its call ``call`` with SystemExit, in the words its callers
    read (the executor's and a shared-process host's)."""
    if isinstance(e, ActorExit):
        return getattr(e, "reason", "") or "exit_actor() was called"
    return f"sys.exit({e.code!r}) was called in {call}()"


class ActorAlreadyExistsError(EmberError, ValueError):
    """An actor was created with a name already taken in its namespace (Ray's class: a
    ``ValueError``, so code written for older Ray that catches ValueError still works)."""


class GetTimeoutError(EmberError, TimeoutError):
    """``get`` reached its timeout before the objects were ready."""


class TaskCancelledError(EmberError):
    """The task was cancelled with ``ember.cancel``."""

    def __init__(self, task_id: str = "") -> None:
        self.task_id = task_id
        super().__init__(f"Task {task_id} was cancelled")

    def __reduce__(self):
        return (TaskCancelledError, (self.task_id,))


class ObjectLostError(EmberError):
    """The object's every copy is gone and it cannot be rebuilt."""

    def __init__(self, object_id: str = "", reason: str = "all copies were lost") -> None:
        self.object_id = object_id
        self.reason = reason
        super().__init__(f"Object {object_id} is lost: {reason}")

    def __reduce__(self):
        return (type(self), (self.object_id, self.reason))


class OwnerDiedError(ObjectLostError):
    """The process that owned the object (created it) died, taking its metadata with it."""


class ObjectUnknownOwnerError(OwnerDiedError, ValueError):
    """The ref names no owner: it was built from bare bytes (``ObjectRef(id)``) or carried
    out of band, so no process can say where its value is or whether it exists.

    Ray raises a ``ValueError`` for this (its ``ObjectUnknownOwner`` status); this is one,
    and an ``OwnerDiedError``, so either ``except`` catches it."""

    def __init__(self, object_id: str = "", reason: str = "") -> None:
        super().__init__(object_id, reason)
        self.args = (
            f"Object {object_id} has no known owner: {reason or 'it names no owner'}. Only "
            "refs returned by put() or .remote(), or received inside a value or as an "
            "argument, can be read; a ref rebuilt from its bytes cannot.",
        )


# The rest of Ray's object errors, so a migrated program's ``except`` clauses name classes
# that exist (each is an ObjectLostError, as in Ray).
class ObjectFreedError(ObjectLostError):
    """The object was freed (``ray._private.internal_api.free``) before it was read."""


class ObjectFetchTimedOutError(ObjectLostError):
    """The object could not be fetched from another node in time."""


class ObjectReconstructionFailedError(ObjectLostError):
    """Every copy was lost and rebuilding it failed."""


class ObjectReconstructionFailedMaxAttemptsExceededError(ObjectLostError):
    """Every copy was lost and the task that made it has no retries left to rebuild it."""


class ObjectReconstructionFailedLineageEvictedError(ObjectLostError):
    """Every copy was lost and the lineage to rebuild it was dropped (memory bound)."""


class ReferenceCountingAssertionError(ObjectLostError, AssertionError):
    """The object was freed while a reference to it was still counted."""


class ObjectStoreFullError(EmberError):
    """The node's shared-memory store cannot hold the object, even after eviction."""


class OutOfMemoryError(EmberError):
    """The node ran out of memory."""


class RuntimeEnvSetupError(EmberError):
    """The runtime environment could not be set up."""


class PendingCallsLimitExceeded(EmberError):
    """Too many calls queued on an actor handle."""


class TaskUnschedulableError(EmberError):
    """No node can run the task as asked (e.g. hard affinity to a node that is gone)."""


class ActorUnschedulableError(EmberError):
    """No node can ever run the actor as asked (hard affinity to a node that is gone or too
    small): its calls fail with this at once, as in Ray, instead of waiting forever."""

    def __init__(self, actor_id: str = "", cause: str = "") -> None:
        self.actor_id = actor_id
        self.cause = cause
        super().__init__(f"The actor {actor_id} is unschedulable: {cause}")

    def __reduce__(self):
        return (ActorUnschedulableError, (self.actor_id, self.cause))


class NodeDiedError(EmberError):
    """The node running the task died."""


class LocalRayletDiedError(EmberError):
    """This process's own node manager (the raylet) died."""


class TaskPlacementGroupRemoved(EmberError):
    """The placement group the task was to run in was removed."""


class ActorPlacementGroupRemoved(EmberError):
    """The placement group the actor was to run in was removed."""


class AsyncioActorExit(EmberError):
    """Raised inside an async actor to end it (Ray's ``exit_actor`` in an async method)."""


class OutOfDiskError(EmberError):
    """The node's disk is full (object spilling or logs cannot write)."""


class CrossLanguageError(EmberError):
    """An error from a task in another language (kept for Ray's names; Ember runs Python)."""


class RaySystemError(EmberError):
    """An internal error of the runtime."""


class RemoteUsageError(EmberError, TypeError, AttributeError):
    """``.remote`` reached where there is no remote callable: a plain function, or a method
    looked up on an actor class instead of on an actor handle.

    A ``TypeError`` whose message says what to write instead; also an ``AttributeError``, so
    ``hasattr``, ``getattr(x, name, default)`` and cloudpickle's attribute probes still see
    "no such attribute" as they did before.
    """

    def __init__(self, message: str, name: str, obj: Any) -> None:
        super().__init__(message)
        self.name = name  # AttributeError's fields, for tracebacks' "did you mean" hints
        self.obj = obj


# Ray's names, so ``from ray.exceptions import X`` ports by changing the import only.
RayError = EmberError
RayTaskError = TaskError
RayActorError = ActorError
RayWorkerError = WorkerCrashedError
RayTimeoutError = GetTimeoutError  # Ray 0.8's name
EmberSystemError = RaySystemError


# Ray's ``ErrorType`` names for why a task failed (the state API's ``error_type``), by the
# error its callers get. Order matters: the first class the error is an instance of wins
# (OwnerDiedError before ObjectLostError).
_ERROR_TYPES: tuple[tuple[type, str], ...] = (
    (TaskCancelledError, "TASK_CANCELLED"),
    (ActorDiedError, "ACTOR_DIED"),
    (ActorUnavailableError, "ACTOR_UNAVAILABLE"),
    (WorkerCrashedError, "WORKER_DIED"),
    (NodeDiedError, "NODE_DIED"),
    (OutOfMemoryError, "OUT_OF_MEMORY"),
    (OwnerDiedError, "OBJECT_UNRECONSTRUCTABLE_OWNER_DIED"),
    (ObjectLostError, "OBJECT_UNRECONSTRUCTABLE"),
    (RuntimeEnvSetupError, "RUNTIME_ENV_SETUP_FAILED"),
    (TaskUnschedulableError, "TASK_UNSCHEDULABLE_ERROR"),
    (ObjectStoreFullError, "OBJECT_STORE_FULL"),
)


def error_type_of(error: BaseException) -> str:
    """Ray's name for the kind of failure ``error`` reports (``TASK_EXECUTION_EXCEPTION``
    for an exception the task's own code raised)."""
    if isinstance(error, TaskError) and not isinstance(error, TaskCancelledError):
        return "TASK_EXECUTION_EXCEPTION"
    for cls, name in _ERROR_TYPES:
        if isinstance(error, cls):
            return name
    return "TASK_EXECUTION_EXCEPTION"
