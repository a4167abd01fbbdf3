"""Remote classes: ``Cls.remote(...)`` creates an actor and returns an ``ActorHandle``.

The GCS places and restarts actors; calls go from the caller straight to the actor's worker.
An actor lives while any handle to it exists anywhere (its handle count is the reference count
of a synthetic object owned by the creator), unless it is detached.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

from ember import global_state, options
from ember.core_worker.task_spec import ACTOR_CREATION_TASK, ACTOR_TASK, TaskSpec
from ember.exceptions import RemoteUsageError
from ember.ids import TASK_ID_SIZE, actor_handle_object_id, new_task_id, new_unique_id
from ember.object_ref import ObjectRef
from ember.serialization import dumps_function

_handle_objects: dict[bytes, bytes] = {}  # {handle object id: actor id}


def actor_id_for_handle_object(object_id: bytes) -> bytes | None:
    return _handle_objects.get(object_id)


def method(**opts: Any):
    """``@ember.method(num_returns=2)`` on an actor method sets its defaults."""
    opts = options.validate(opts, options.METHOD_OPTIONS, "ember.method")

    def decorate(fn):
        fn.__ember_method_options__ = opts
        return fn

    return decorate


def exit_actor() -> None:
    """Ends the current actor after this call (its handles then raise ActorDiedError)."""
    from ember.core_worker.executor import ActorExit

    worker = global_state.require_worker()
    if getattr(worker, "actor_id", None) is None:
        raise TypeError("exit_actor() was called outside an actor")
    raise ActorExit(0)


def _method_table(cls: type) -> dict[str, dict[str, Any]]:
    table = {}
    for name, member in inspect.getmembers(cls):
        if not callable(member) or (name.startswith("__") and name != "__call__"):
            continue
        opts = getattr(member, "__ember_method_options__", {})
        table[name] = {
            "num_returns": opts.get("num_returns", 1),
            "max_task_retries": opts.get("max_task_retries"),
            "is_async": inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member),
        }
    return table


class ActorClass:
    def __init__(self, cls: type, opts: dict[str, Any]) -> None:
        self._cls = cls
        self._name = cls.__qualname__
        self._opts = options.validate(opts, options.ACTOR_OPTIONS, f"actor class {self._name}")
        self._methods = _method_table(cls)
        self._is_async = any(m["is_async"] for m in self._methods.values())
        self._pickled: bytes | None = None
        self._class_id: bytes | None = None
        self.__doc__ = cls.__doc__
        self.__name__ = cls.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"Actors cannot be instantiated directly. Instead of '{self._name}()', "
            f"use '{self._name}.remote()'."
        )

    def __getattr__(self, name: str) -> Any:
        # Only reached for what the instance lacks, so also during unpickling (no _methods yet).
        methods = self.__dict__.get("_methods") or {}
        cls_name = self.__dict__.get("_name", "ActorClass")
        if name in methods:
            raise RemoteUsageError(
                f"'{cls_name}.{name}' is looked up on the actor class; methods are called on "
                f"an actor: create one first, then call the method on its handle: "
                f"actor = {cls_name}.remote(...); actor.{name}.remote(...)",
                name,
                self,
            )
        raise AttributeError(f"actor class '{cls_name}' has no attribute {name!r}")

    def options(self, **opts: Any) -> _BoundActorOptions:
        merged = {**self._opts, **options.validate(opts, options.ACTOR_OPTIONS, self._name)}
        return _BoundActorOptions(self, merged)

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        return self._create(args, kwargs, self._opts)

    def _create(self, args: tuple, kwargs: dict, opts: dict) -> ActorHandle:
        worker = global_state.worker
        if worker is None:
            from ember.api import auto_init

            worker = auto_init()
        if worker.local_mode:
            return worker.create_local_actor(self, args, kwargs, opts)
        name = opts.get("name")
        namespace = opts.get("namespace") or worker.namespace
        if name and opts.get("get_if_exists"):
            from ember.api import get_actor

            try:
                return get_actor(name, namespace=namespace)
            except ValueError:
                pass
        if self._pickled is None:
            self._pickled = dumps_function(self._cls)
            self._class_id = hashlib.sha1(self._pickled).digest()[:16]
        actor_id = new_unique_id()
        encoded, kw_names, nested = worker.encode_args(args, kwargs, f"{self._name}.__init__")
        resources = options.resource_shape(opts, 0)
        detached = opts.get("lifetime") == "detached"
        spec = TaskSpec(
            task_id=new_task_id(),
            kind=ACTOR_CREATION_TASK,
            function_id=self._class_id,
            function_name=f"{self._cls.__module__}.{self._name}.__init__",
            function_bytes=self._pickled,
            args=encoded,
            kwarg_names=kw_names,
            num_returns=1,
            resources=resources,
            actor_id=actor_id,
            nested_refs=nested,
            owner=worker.owner_address,
            job_id=worker.job_id,
            parent_task_id=worker.current_task_id(),
            actor_options={
                "class_name": self._name,
                "module": self._cls.__module__,
                "name": name or "",
                "namespace": namespace,
                "detached": detached,
                "max_restarts": opts.get("max_restarts", 0),
                "max_task_retries": opts.get("max_task_retries", 0),
                "max_pending_calls": opts.get("max_pending_calls", -1),
                "max_concurrency": opts.get("max_concurrency") or (1000 if self._is_async else 1),
                "is_async": self._is_async,
                "needs_cpu_node": opts.get("num_cpus") is None,
                "methods": self._methods,
            },
            strategy=_strategy_value(opts),
            code_path=worker.code_path or None,
            namespace=worker.namespace,
        )
        handle_oid = actor_handle_object_id(actor_id)
        _handle_objects[handle_oid] = actor_id
        worker.refs.add_owned(handle_oid, worker.owner_address)
        worker.refs.mark_actor_handle(handle_oid)
        # Keep argument refs alive until the constructor has run.
        held = spec.arg_refs()
        if held:
            worker.refs.add_submitted(held)
        worker.drop_submission_holds()
        # Named actors live until their job ends, as the seeds document (002 §5.3.8), even
        # with no handle left: get_actor() can find them later.
        worker.create_actor(spec, held, unscoped=detached or bool(name))
        handle = ActorHandle(
            actor_id,
            self._name,
            self._methods,
            worker.owner_address,
            opts.get("max_task_retries", 0) or 0,
            max_pending_calls=opts.get("max_pending_calls", -1),
        )
        return handle


class _BoundActorOptions:
    def __init__(self, actor_class: ActorClass, opts: dict[str, Any]) -> None:
        self._actor_class = actor_class
        self._opts = opts

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        return self._actor_class._create(args, kwargs, self._opts)


def _strategy_value(opts: dict) -> Any:
    from ember.remote_function import _strategy_value as value

    strategy = opts.get("scheduling_strategy")
    if opts.get("placement_group") not in (None, "default"):
        from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(
            opts["placement_group"], opts.get("placement_group_bundle_index", -1)
        )
    return value(strategy)


class ActorHandle:
    """A reference to an actor; pass it to tasks and actors, call ``handle.method.remote()``."""

    def __init__(
        self,
        actor_id: bytes,
        class_name: str,
        methods: dict[str, dict[str, Any]],
        owner: Any,
        max_task_retries: int = 0,
        _count: bool = True,
        max_pending_calls: int = -1,
    ) -> None:
        self._actor_id = actor_id
        self._class_name = class_name
        self._methods = methods
        self._owner = owner
        self._max_task_retries = max_task_retries
        # Calls this process may have pending on the actor at once (-1: no limit); past it a
        # call raises PendingCallsLimitExceeded, as in Ray.
        self._max_pending_calls = max_pending_calls
        # Counting this handle as a reference keeps the actor alive (see module doc).
        self._handle_ref = ObjectRef(actor_handle_object_id(actor_id), owner, _count=_count)
        worker = global_state.worker
        if worker is not None and _count:
            worker.loop.call_soon_threadsafe(
                worker.actor_submitter.set_retries, actor_id, max_task_retries
            )

    def __getattr__(self, name: str) -> ActorMethod:
        methods = self.__dict__.get("_methods")
        if methods is None or name not in methods:
            raise AttributeError(
                f"'{self.__dict__.get('_class_name', 'Actor')}' actor has no method {name!r}"
            )
        return ActorMethod(self, name, methods[name])

    def __repr__(self) -> str:
        return f"Actor({self._class_name}, {self._actor_id.hex()})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self) -> int:
        return hash(self._actor_id)

    @property
    def _ray_actor_id(self) -> bytes:
        return self._actor_id

    def __reduce__(self):
        # The synthetic handle object travels with it, so the receiver counts as a borrower.
        return (
            _rebuild_handle,
            (
                self._actor_id,
                self._class_name,
                self._methods,
                self._owner,
                self._max_task_retries,
                self._handle_ref,
                self._max_pending_calls,
            ),
        )


def _rebuild_handle(
    actor_id, class_name, methods, owner, max_task_retries, handle_ref, max_pending_calls=-1
):
    handle = ActorHandle(
        actor_id,
        class_name,
        methods,
        owner,
        max_task_retries,
        _count=False,
        max_pending_calls=max_pending_calls,
    )
    handle._handle_ref = handle_ref  # the deserialized ref already counts (and borrows)
    _handle_objects[actor_handle_object_id(actor_id)] = actor_id
    worker = global_state.worker
    if worker is not None:
        worker.loop.call_soon_threadsafe(
            worker.actor_submitter.set_retries, actor_id, max_task_retries
        )
    return handle


class ActorMethod:
    def __init__(self, handle: ActorHandle, name: str, meta: dict[str, Any]) -> None:
        self._handle = handle
        self._name = name
        self._meta = meta

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"Actor methods cannot be called directly. Instead of "
            f"'{self._handle._class_name}.{self._name}()', try "
            f"'{self._handle._class_name}.{self._name}.remote()'."
        )

    def options(self, **opts: Any) -> _BoundMethodOptions:
        opts = options.validate(opts, options.METHOD_OPTIONS, f"method {self._name}")
        return _BoundMethodOptions(self, opts)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._submit(args, kwargs, {})

    def _submit(self, args: tuple, kwargs: dict, opts: dict) -> Any:
        worker = global_state.require_worker()
        handle = self._handle
        if worker.local_mode:
            return worker.call_local_actor(handle, self._name, args, kwargs, opts, self._meta)
        num_returns = opts.get("num_returns", self._meta.get("num_returns", 1))
        encoded, kw_names, nested = worker.encode_args(
            args, kwargs, f"{handle._class_name}.{self._name}"
        )
        retries = opts.get("max_task_retries", self._meta.get("max_task_retries"))
        spec = TaskSpec(
            task_id=new_task_id(),
            kind=ACTOR_TASK,
            function_name=f"{handle._class_name}.{self._name}",
            method_name=self._name,
            args=encoded,
            kwarg_names=kw_names,
            num_returns=num_returns,
            actor_id=handle._actor_id,
            max_retries=retries if retries is not None else handle._max_task_retries,
            nested_refs=nested,
            name=opts.get("name") or "",
        )
        if handle._max_pending_calls > 0:
            worker.admit_limited_call(spec, handle._max_pending_calls)
        refs = worker.submit_actor_task(spec)
        if num_returns == 1:
            return refs[0]
        return refs if num_returns != 0 else None


class _BoundMethodOptions:
    def __init__(self, method: ActorMethod, opts: dict[str, Any]) -> None:
        self._method = method
        self._opts = opts

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._method._submit(args, kwargs, self._opts)


assert TASK_ID_SIZE == 16
