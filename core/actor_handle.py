"""Actor handles: ``handle.method.remote(...)`` submits a call to the actor.

A handle is plain data (the actor's id, class name, method table and owner) plus one counted
``ObjectRef`` to a synthetic object named after the actor: the owner's reference count of
that object is the actor's handle count, so the actor lives while any handle to it exists
anywhere (unless it is detached). A *weak* handle (``get_actor``'s, and an actor's handle to
itself) counts for nothing, nor do its copies (Ray 2.x's rule: a named actor ends with its
creator's handles, however many processes looked it up). Creating actors is
``ember.actor``'s; handles sit below it so that the local-mode worker can make them too.
"""

from __future__ import annotations

import functools
from typing import Any

from ember import global_state, options
from ember.call_signature import check_call
from ember.core_worker.task_spec import ACTOR_TASK, TaskSpec
from ember.ids import actor_handle_object_id, new_task_id
from ember.object_ref import ObjectRef
from ember.object_ref_generator import check_generator_returns, generator_mode, submit_generator


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
        _weak: bool = False,
    ) -> None:
        self._actor_id = actor_id
        self._class_name = class_name
        self._methods = methods
        self._owner = owner
        self._max_task_retries = max_task_retries
        # Calls this process may have pending on the actor at once (-1: no limit); past it a
        # call raises PendingCallsLimitExceeded, as in Ray.
        self._max_pending_calls = max_pending_calls
        # Counting this handle as a reference keeps the actor alive (see module doc); a weak
        # handle has none to count.
        self._handle_ref: ObjectRef | None = None
        if not _weak:
            self._handle_ref = ObjectRef(actor_handle_object_id(actor_id), owner, _count=_count)
        worker = global_state.worker
        if worker is not None and (_count or _weak):
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
                self._handle_ref,  # None for a weak handle: its copies are weak too
                self._max_pending_calls,
            ),
        )


def _rebuild_handle(
    actor_id, class_name, methods, owner, max_task_retries, handle_ref, max_pending_calls=-1
):
    if handle_ref is None:
        return ActorHandle(
            actor_id,
            class_name,
            methods,
            owner,
            max_task_retries,
            max_pending_calls=max_pending_calls,
            _weak=True,
        )
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
    worker = global_state.worker
    if worker is not None:
        worker.loop.call_soon_threadsafe(
            worker.actor_submitter.set_retries, actor_id, max_task_retries
        )
    return handle


class ActorMethod(options.OlderRemoteSpelling):
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
        check_generator_returns(
            opts.get("num_returns"), bool(self._meta.get("generator")), f"method {self._name}"
        )
        return _BoundMethodOptions(self, opts)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._submit(args, kwargs, {})

    def _submit(self, args: tuple, kwargs: dict, opts: dict) -> Any:
        worker = global_state.require_worker()
        handle = self._handle
        meta = self._meta
        arity = meta.get("arity")
        if arity is not None:
            check_call(meta["params"], arity, args, kwargs, f"{handle._class_name}.{self._name}")
        if worker.local_mode:
            return worker.call_local_actor(handle, self._name, args, kwargs, opts, self._meta)
        num_returns = opts.get("num_returns", self._meta.get("num_returns", 1))
        generator = 0
        if self._meta.get("generator"):
            num_returns, generator = generator_mode(num_returns)
        function_name = f"{handle._class_name}.{self._name}"
        encoded, kw_names, nested = worker.encode_args(args, kwargs, function_name)
        retries = opts.get("max_task_retries", self._meta.get("max_task_retries"))
        allowed = opts.get("retry_exceptions", self._meta.get("retry_exceptions", False))
        if isinstance(allowed, bytes):  # the method table's pickled list (actor._portable_retry)
            allowed = _loads_retry(allowed)
        spec = TaskSpec(
            task_id=new_task_id(),
            kind=ACTOR_TASK,
            function_name=function_name,
            method_name=self._name,
            actor_id=handle._actor_id,
        )
        spec.set_optional(encoded, kw_names, num_returns, nested, opts.get("name"), allowed)
        retries = retries if retries is not None else handle._max_task_retries
        if retries:
            spec.max_retries = retries
        group = opts.get("concurrency_group") or self._meta.get("concurrency_group")
        if group:
            spec.concurrency_group = group
        if handle._max_pending_calls > 0:
            worker.admit_limited_call(spec, handle._max_pending_calls)
        if generator:
            spec.generator = generator
            return submit_generator(worker, spec, worker.submit_actor_task)
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


@functools.lru_cache(maxsize=256)
def _loads_retry(data: bytes) -> list:
    import cloudpickle

    return cloudpickle.loads(data)
