"""``init(local_mode=True)``: everything runs serially in the driver, for debugging.

Tasks run at ``.remote()`` time, actors are plain objects in this process; values still go
through pickling so a program sees the same copy semantics as on a cluster.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import threading
from typing import Any

from ember.actor_handle import ActorHandle
from ember.core_worker.method_lookup import actor_method
from ember.exceptions import ActorDiedError, GetTimeoutError, TaskError, format_user_exception
from ember.ids import new_task_id, new_unique_id, object_id_for_put, object_id_for_return
from ember.object_ref import ObjectRef
from ember.object_ref_generator import DynamicObjectRefGenerator, ObjectRefGenerator
from ember.serialization import deserialize, serialize


class _NoRefs:
    def add_local(self, *a: Any) -> None: ...
    def remove_local(self, *a: Any) -> None: ...
    def on_deserialized(self, *a: Any) -> None: ...


class LocalModeWorker:
    local_mode = True
    mode = "driver"
    executor = None

    def __init__(self, num_cpus=None, num_gpus=None, resources=None) -> None:
        self.refs = _NoRefs()
        self.job_id = new_unique_id()[:8]
        self.node_id = new_unique_id()
        self.worker_id = new_unique_id()
        self.namespace = ""
        self.actor_id = None
        self.node: dict[str, Any] = {"node_id": self.node_id}
        self.current = threading.local()
        self._objects: dict[bytes, tuple[bool, bytes, list]] = {}  # {id: (is_error, data, bufs)}
        self._actors: dict[bytes, Any] = {}
        self._named: dict[str, Any] = {}
        self._put_index = 0
        self._resources = {"CPU": float(num_cpus or os.cpu_count() or 1)}
        if num_gpus:
            self._resources["GPU"] = float(num_gpus)
        self._resources.update(resources or {})

    def _store(self, object_id: bytes, value: Any, is_error: bool = False) -> ObjectRef:
        ser = serialize(value)
        self._objects[object_id] = (is_error, ser.data, [bytes(memoryview(b)) for b in ser.buffers])
        return ObjectRef(object_id, None, _count=False)

    def put(self, value: Any, _call_site: str = "") -> ObjectRef:
        self._put_index += 1
        return self._store(object_id_for_put(new_task_id(), self._put_index), value)

    def get(self, refs: list[ObjectRef], timeout: float | None = None) -> list[Any]:
        out = []
        for r in refs:
            entry = self._objects.get(r.binary())
            if entry is None:
                raise GetTimeoutError(f"object {r.hex()} does not exist in local mode")
            is_error, data, bufs = entry
            value = deserialize(data, bufs)
            if is_error:
                raise value.as_instanceof_cause() if isinstance(value, TaskError) else value
            out.append(value)
        return out

    def wait(self, refs, num_returns, timeout, fetch_local=True, ids=None):
        return list(refs[:num_returns]), list(refs[num_returns:])

    def object_future(self, ref: ObjectRef):
        fut: concurrent.futures.Future = concurrent.futures.Future()
        try:
            fut.set_result(self.get([ref])[0])
        except BaseException as e:
            fut.set_exception(e)
        return fut

    def _resolve(self, args: tuple, kwargs: dict) -> tuple[list, dict]:
        def one(v: Any) -> Any:
            return self.get([v])[0] if isinstance(v, ObjectRef) else v

        return [one(a) for a in args], {k: one(v) for k, v in kwargs.items()}

    def _run(self, name: str, fn: Any, args: tuple, kwargs: dict, num_returns: Any) -> Any:
        if num_returns in ("streaming", "dynamic", None):
            return self._run_generator(name, fn, args, kwargs, num_returns)
        task_id = new_task_id()
        ids = [object_id_for_return(task_id, i + 1) for i in range(max(num_returns, 1))]
        self.current.task_id = task_id
        try:
            a, kw = self._resolve(args, kwargs)
            result = fn(*a, **kw)
            if inspect.iscoroutine(result):
                result = asyncio.run(result)
            if inspect.isgenerator(result):  # a generator with a static num_returns
                result = list(result)
                if len(result) != num_returns:
                    raise ValueError(
                        f"Task returned {len(result)} objects, but num_returns={num_returns}."
                    )
                result = result[0] if num_returns == 1 else result
            values = [result] if num_returns == 1 else list(result)
            refs = [self._store(i, v) for i, v in zip(ids, values, strict=False)]
        except Exception as e:
            err = TaskError(name, format_user_exception(e), e, pid=os.getpid())
            refs = [self._store(i, err, is_error=True) for i in ids]
        finally:
            self.current.task_id = None
        if num_returns == 1:
            return refs[0]
        return refs if num_returns else None

    def _run_generator(self, name: str, fn: Any, args: tuple, kwargs: dict, mode: Any) -> Any:
        """A streaming or dynamic generator, run to its end at once: its items' refs, the
        error (if it raised) as the last one."""
        task_id = new_task_id()
        refs: list[ObjectRef] = []
        self.current.task_id = task_id
        try:
            a, kw = self._resolve(args, kwargs)
            result = fn(*a, **kw)
            if inspect.isasyncgen(result):
                result = asyncio.run(_collect_async(result))
            for value in result:
                refs.append(self._store(object_id_for_return(task_id, len(refs) + 2), value))
        except Exception as e:
            err = TaskError(name, format_user_exception(e), e, pid=os.getpid())
            oid = object_id_for_return(task_id, len(refs) + 2)
            refs.append(self._store(oid, err, is_error=True))
        finally:
            self.current.task_id = None
        if mode == "dynamic":
            return self._store(object_id_for_return(task_id, 1), DynamicObjectRefGenerator(refs))
        stream = _LocalStream(refs)
        done = self._store(object_id_for_return(task_id, 1), None)
        return ObjectRefGenerator(done, self, stream, streams=stream)

    def run_local(self, fn: Any, args: tuple, kwargs: dict, opts: dict) -> Any:
        generator = inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)
        return self._run(
            getattr(fn, "__name__", "task"),
            fn,
            args,
            kwargs,
            opts.get("num_returns", "streaming" if generator else 1),
        )

    def create_local_actor(self, actor_class: Any, args: tuple, kwargs: dict, opts: dict) -> Any:
        a, kw = self._resolve(args, kwargs)
        instance = actor_class._cls(*a, **kw)
        actor_id = new_unique_id()
        self._actors[actor_id] = instance
        handle = ActorHandle(
            actor_id, actor_class._name, actor_class._methods, None, 0, _count=False
        )
        if opts.get("name"):
            self._named[opts["name"]] = handle
        return handle

    def call_local_actor(self, handle, name, args, kwargs, opts, meta) -> Any:
        instance = self._actors.get(handle._actor_id)
        if instance is None:
            raise ActorDiedError(handle._actor_id.hex(), "the actor was killed")
        num_returns = opts.get("num_returns", meta.get("num_returns", 1))
        method = actor_method(instance, name)[0]  # the class's method wins, as in Ray
        if method is None:
            raise AttributeError(f"actor {handle._class_name} has no method {name!r}")
        return self._run(f"{handle._class_name}.{name}", method, args, kwargs, num_returns)

    def kill_local_actor(self, handle: Any) -> None:
        self._actors.pop(handle._actor_id, None)

    def local_actor_names(self) -> list[str]:
        return list(self._named)

    def get_local_actor(self, name: str) -> Any:
        if name not in self._named:
            raise ValueError(f"Failed to look up actor with name {name!r}")
        return self._named[name]

    def nodes(self) -> list[dict]:
        return [{"NodeID": self.node_id.hex(), "Alive": True, "Resources": self._resources}]

    def cluster_resources(self) -> dict[str, float]:
        return dict(self._resources)

    def shutdown(self) -> None:
        self._objects.clear()
        self._actors.clear()


async def _collect_async(agen: Any) -> list:
    return [value async for value in agen]


class _LocalStream:
    """A local-mode generator's items, all there from the start: what ``ObjectRefGenerator``
    asks of a stream (``streams.peek``/``take``/``finished``), over a list."""

    def __init__(self, refs: list[ObjectRef]) -> None:
        self.refs = list(refs)

    def peek(self, stream: _LocalStream) -> tuple[bool, ObjectRef]:
        return True, ObjectRef.nil()

    def take(self, stream: _LocalStream) -> ObjectRef | None:
        return self.refs.pop(0) if self.refs else None

    def finished(self, stream: _LocalStream) -> bool:
        return not self.refs
