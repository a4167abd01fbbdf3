"""Remote classes: ``Cls.remote(...)`` creates an actor and returns an ``ActorHandle``;
``get_actor`` finds a named one; ``exit_actor`` ends the current one.

The GCS places and restarts actors; calls go from the caller straight to the actor's worker
(``ember.actor_handle``). An actor lives while any handle to it exists anywhere (its handle
count is the reference count of a synthetic object owned by the creator), unless it is
detached; a named actor too (Ray 2.x), and ``get_actor``'s handles do not count.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
from typing import Any

from ember import global_state, options
from ember.actor_handle import ActorHandle, ActorMethod
from ember.call_signature import arity_of, check_call, params_of
from ember.core_worker.task_spec import ACTOR_CREATION_TASK, TaskSpec
from ember.driver import current_worker
from ember.exceptions import ActorExit, RemoteUsageError
from ember.ids import new_task_id, new_unique_id
from ember.object_ref_generator import check_generator_returns
from ember.runtime_env import inherited_env
from ember.serialization import dumps_function
from ember.util.placement_group import captured_strategy

_MISSING = object()

__all__ = [
    "ActorClass",
    "ActorHandle",
    "ActorMethod",
    "exit_actor",
    "get_actor",
    "list_named_actors",
    "method",
]


def method(**opts: Any):
    """``@ember.method(num_returns=2)`` on an actor method sets its defaults."""
    opts = options.validate(opts, options.METHOD_OPTIONS, "ember.method")

    def decorate(fn):
        fn.__ember_method_options__ = opts
        return fn

    return decorate


def exit_actor() -> None:
    """Ends the current actor after this call (its handles then raise ActorDiedError)."""
    worker = global_state.require_worker()
    if getattr(worker, "actor_id", None) is None:
        raise TypeError("exit_actor() was called outside an actor")
    raise ActorExit(0)


# Every actor has them (Ray's): ``__ray_ready__`` resolves once it is constructed,
# ``__ray_terminate__`` ends it after the calls sent before it (the executor runs both).
_BUILT_IN = {"num_returns": 1, "max_task_retries": None, "is_async": False, "concurrency_group": ""}


def _portable_retry(allowed: Any) -> Any:
    """A method's ``retry_exceptions`` as the method table carries it: True/False, or the
    list pickled by value (the table goes through the GCS, which must not need the classes:
    one defined in the driver's ``__main__`` could not be imported there)."""
    if isinstance(allowed, list | tuple):
        import cloudpickle

        return cloudpickle.dumps(list(allowed))
    return bool(allowed)


def _concurrency_groups(groups: Any, cls_name: str) -> dict[str, int]:
    """``{name: size}`` from the class's ``concurrency_groups`` option (a dict; Ray's list
    form names groups of size 1)."""
    if not groups:
        return {}
    if isinstance(groups, list):
        groups = dict.fromkeys(groups, 1)
    for name, size in groups.items():
        if not isinstance(name, str) or not name or not isinstance(size, int) or size < 1:
            raise ValueError(
                f"concurrency_groups of {cls_name}: each group is a non-empty name with a size "
                f">= 1 (its number of concurrent calls); got {name!r}: {size!r}"
            )
    return dict(groups)


def _method_table(cls: type) -> dict[str, dict[str, Any]]:
    table = {"__ray_ready__": dict(_BUILT_IN), "__ray_terminate__": dict(_BUILT_IN)}
    for name, member in inspect.getmembers(cls):
        if not callable(member) or (name.startswith("__") and name != "__call__"):
            continue
        opts = getattr(member, "__ember_method_options__", {})
        generator = inspect.isgeneratorfunction(member) or inspect.isasyncgenfunction(member)
        check_generator_returns(opts.get("num_returns"), generator, f"{cls.__name__}.{name}")
        table[name] = {
            # A generator method streams its items unless num_returns says otherwise.
            "num_returns": opts.get("num_returns", "streaming" if generator else 1),
            "max_task_retries": opts.get("max_task_retries"),
            "retry_exceptions": _portable_retry(opts.get("retry_exceptions")),
            "concurrency_group": opts.get("concurrency_group") or "",
            "is_async": inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member),
        }
        if generator:
            table[name]["generator"] = True
        # What a call must bind to (call_signature): an instance method's without its self.
        static = isinstance(inspect.getattr_static(cls, name, None), staticmethod | classmethod)
        params = params_of(member, drop_first=not static and inspect.isfunction(member))
        if params is not None:
            table[name]["params"] = params
            table[name]["arity"] = arity_of(params)
    return table


class ActorClass(options.OlderRemoteSpelling):
    def __init__(self, cls: type, opts: dict[str, Any]) -> None:
        self._cls = cls
        self._name = cls.__name__  # as Ray: Box.method, wherever Box is nested
        self._opts = options.validate(opts, options.ACTOR_OPTIONS, f"actor class {self._name}")
        self._methods = _method_table(cls)
        self._init_params = params_of(cls)  # what the constructor's arguments must bind to
        self._init_arity = arity_of(self._init_params)
        self._is_async = any(m["is_async"] for m in self._methods.values())
        self._groups = _concurrency_groups(self._opts.get("concurrency_groups"), self._name)
        for method_name, meta in self._methods.items():
            group = meta["concurrency_group"]
            if group and group not in self._groups:
                raise ValueError(
                    f"{self._name}.{method_name} is in concurrency group {group!r}, which the "
                    f"actor does not declare (declared: {sorted(self._groups) or 'none'}); add "
                    f"it to @ember.remote(concurrency_groups={{{group!r}: N}})"
                )
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
        cls = self.__dict__.get("_cls")
        # What the user's class holds besides its methods reads through, as on Ray (whose
        # actor class derives from the user's): class attributes, inherited ones, static and
        # class methods (``T.X``, ``T.helper()``). Dunder names stay the ActorClass's own.
        found = (
            inspect.getattr_static(cls, name, _MISSING)
            if cls is not None and not (name.startswith("__") and name.endswith("__"))
            else _MISSING
        )
        if isinstance(found, staticmethod | classmethod):
            return getattr(cls, name)
        if name in methods:
            raise RemoteUsageError(
                f"'{cls_name}.{name}' is looked up on the actor class; methods are called on "
                f"an actor: create one first, then call the method on its handle: "
                f"actor = {cls_name}.remote(...); actor.{name}.remote(...)",
                name,
                self,
            )
        if found is not _MISSING:
            return getattr(cls, name)
        raise AttributeError(f"actor class '{cls_name}' has no attribute {name!r}")

    def __mro_entries__(self, bases: tuple) -> tuple:
        # ``class B(A)`` with ``A`` an actor class: Python asks its bases here.
        raise TypeError(
            "Inheriting from actor classes is not currently supported. You can instead "
            "inherit from a non-actor base class and make the derived class an actor class "
            f"(with @ember.remote): class {self._name}Base: ..., then "
            f"{self._name} = ember.remote({self._name}Base)."
        )

    def options(self, **opts: Any) -> _BoundActorOptions:
        merged = {
            **self._opts,
            **options.validate(opts, options.ACTOR_OPTIONS, self._name, in_options=True),
        }
        return _BoundActorOptions(self, merged)

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        return self._create(args, kwargs, self._opts)

    def _create(self, args: tuple, kwargs: dict, opts: dict) -> ActorHandle:
        name, namespace = opts.get("name"), opts.get("namespace")
        if name is not None and name == "":
            raise ValueError("Actor name cannot be an empty string.")
        if namespace is not None and namespace == "":
            raise ValueError('"" is not a valid namespace. Pass None to not specify a namespace.')
        check_call(self._init_params, self._init_arity, args, kwargs, f"{self._name}.__init__")
        worker = current_worker()
        if worker.local_mode:
            return worker.create_local_actor(self, args, kwargs, opts)
        namespace = namespace or worker.namespace
        if not (name and opts.get("get_if_exists")):
            return self._create_new(worker, args, kwargs, opts, name, namespace)
        # Get or create, never an error: one creation at a time per name in this process, and
        # a name another process took meanwhile means its actor is the one to return.
        with _GET_IF_EXISTS_LOCK:
            try:
                return get_actor(name, namespace=namespace)
            except ValueError:
                pass
            try:
                return self._create_new(worker, args, kwargs, opts, name, namespace)
            except ValueError as e:
                if "is already taken" not in str(e):
                    raise
                return get_actor(name, namespace=namespace)

    def _create_new(
        self,
        worker: Any,
        args: tuple,
        kwargs: dict,
        opts: dict,
        name: str | None,
        namespace: str,
    ) -> ActorHandle:
        if self._pickled is None:
            self._pickled = dumps_function(self._cls)
            self._class_id = hashlib.sha1(self._pickled).digest()[:16]
        options.check_shared_process(opts, f"actor {self._name}")
        actor_id = new_unique_id()
        encoded, kw_names, nested = worker.encode_args(args, kwargs, f"{self._name}.__init__")
        resources = options.resource_shape(opts, 0)
        detached = opts.get("lifetime") == "detached"
        spec = TaskSpec(
            task_id=new_task_id(),
            kind=ACTOR_CREATION_TASK,
            function_id=self._class_id,
            function_name=f"{self._name}.__init__",
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
                "concurrency_groups": self._groups,
                "is_async": self._is_async,
                "needs_cpu_node": opts.get("num_cpus") is None and not opts.get("shared_process"),
                "shared_process": bool(opts.get("shared_process")),
                "methods": self._methods,
            },
            strategy=options.scheduling_strategy(opts) or captured_strategy(worker),
            code_path=worker.code_path or None,
            namespace=worker.namespace,
        )
        env = inherited_env(worker, opts.get("runtime_env"))
        if env:
            spec.runtime_env = env  # applied by its worker for the actor's life
        worker.own_actor_handle_object(actor_id)
        # Keep argument refs alive until the constructor has run.
        held = spec.arg_refs()
        if held:
            worker.refs.add_submitted(held)
        worker.drop_submission_holds()
        # A named actor that is not detached ends with its last handle, as any actor does
        # in Ray 2.x (Ray 0.8 kept it to the job's end); its name is then free again.
        worker.create_actor(spec, held, unscoped=detached)
        handle = ActorHandle(
            actor_id,
            self._name,
            self._methods,
            worker.owner_address,
            opts.get("max_task_retries", 0) or 0,
            max_pending_calls=opts.get("max_pending_calls", -1),
        )
        return handle


_GET_IF_EXISTS_LOCK = threading.Lock()


class _BoundActorOptions:
    def __init__(self, actor_class: ActorClass, opts: dict[str, Any]) -> None:
        self._actor_class = actor_class
        self._opts = opts

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        return self._actor_class._create(args, kwargs, self._opts)


def current_actor_handle(worker: Any) -> ActorHandle:
    """A handle to the actor ``worker`` runs (its creation spec has all a handle needs). Weak,
    as Ray's self handle is: handing it out never keeps the actor alive."""
    spec = worker.executor.actor_spec
    opts = spec.actor_options or {}
    return ActorHandle(
        spec.actor_id,
        opts.get("class_name") or spec.function_name,
        opts.get("methods") or {},
        spec.owner,
        opts.get("max_task_retries", 0) or 0,
        max_pending_calls=opts.get("max_pending_calls", -1),
        _weak=True,
    )


def get_actor(name: str, namespace: str | None = None) -> ActorHandle:
    """The handle of a named actor; ValueError if there is none by that name.

    As in Ray, the handle does not keep the actor alive: a named actor that is not detached
    ends when its creator's handles (and their copies) are gone, however many handles
    ``get_actor`` gave out."""
    _check_name_and_namespace(name, namespace)
    worker = current_worker()
    if worker.local_mode:
        return worker.get_local_actor(name)
    ns = worker.namespace if namespace is None else namespace
    info = worker.call_gcs_sync("get_named_actor", {"name": name, "namespace": ns})
    if info is None:
        raise ValueError(
            f"Failed to look up actor with name {name!r} in namespace {ns!r}. This could "
            "because 1. You are trying to look up a named actor you didn't create. 2. The "
            "named actor died. 3. You did not use a namespace matching the namespace of the "
            "actor."
        )
    return ActorHandle(
        info["actor_id"],
        info["class_name"],
        info.get("methods") or {},
        info["spec_owner"],
        info.get("max_task_retries", 0),
        max_pending_calls=info.get("max_pending_calls", -1),
        _weak=True,  # Ray's: a looked-up handle does not keep the actor alive
    )


def _check_name_and_namespace(name: Any, namespace: Any) -> None:
    """Ray's checks, before any lookup: the wrong type is a TypeError, an empty name a
    ValueError."""
    if not isinstance(name, str):
        raise TypeError(
            f"get_actor() takes the actor's name as a str, not {type(name).__name__} ({name!r})"
        )
    if not name:
        raise ValueError("Please supply a non-empty value to get_actor: the actor's name")
    if namespace is not None and not isinstance(namespace, str):
        raise TypeError(
            f"namespace must be None or a string, not {type(namespace).__name__} ({namespace!r})"
        )


def list_named_actors(all_namespaces: bool = False) -> list[str] | list[dict[str, str]]:
    """The live named actors: their names in the current namespace, or with
    ``all_namespaces=True`` every one as ``{"name": ..., "namespace": ...}`` (Ray's shapes)."""
    worker = current_worker()
    if worker.local_mode:
        found = [{"name": n, "namespace": worker.namespace} for n in worker.local_actor_names()]
    else:
        body: dict[str, Any] = {"namespace": worker.namespace, "all_namespaces": all_namespaces}
        found = worker.call_gcs_sync("list_named_actors", body)
    if all_namespaces:
        return [{"name": a["name"], "namespace": a["namespace"]} for a in found]
    return [a["name"] for a in found]
