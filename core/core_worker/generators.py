"""The executing side of generator tasks: what happens to what a generator function returned
(``TaskSpec.generator`` says which kind; the owner's side is ``generator_streams.py``).

- Streaming: each item is stored as it is yielded (inline, or in shared memory like any
  return) and sent to the caller at once (``generator_item``, one-way, on the connection the
  task came in on), so it can be read while the task still runs. The task's own return is
  None; an exception the generator raises is the task's error, which the owner turns into
  the stream's last item (or retries the task, per ``retry_exceptions``).
- Dynamic: the same sending, then the task returns a ``DynamicObjectRefGenerator`` of the
  items' refs; an exception is its last item (Ray's dynamic generators).
- Static ``num_returns=N``: the items are the task's N returns; another count is an error.
  A generator that raises after k < N items: the first k returns hold them, the rest the
  error (Ray's rule).

A retried streaming task skips the items its caller already has (``spec.generator_skip``).

Order: an item is written to the socket from the executing thread when nothing is queued
ahead of it, as replies are (``Deferred.resolve_threadsafe``); once one had to go through
the I/O loop, the rest follow it there, and before the task replies the loop is waited for.
So the reply never overtakes an item: when the owner reads it, it has them all.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from typing import Any, Protocol

from ember.core_worker import task_values
from ember.core_worker.generator_streams import item_id
from ember.core_worker.locations import error_location
from ember.core_worker.task_spec import GEN_DYNAMIC, GEN_STATIC, TaskSpec
from ember.exceptions import TaskCancelledError
from ember.object_ref import ObjectRef
from ember.object_ref_generator import DynamicObjectRefGenerator
from ember.serialization import SerializedObject, serialize


class _Host(Protocol):
    def run_sync(self, coro: Any, timeout: float | None) -> Any: ...
    def store_serialized(
        self, object_id: bytes, ser: SerializedObject, owner: Any, zero_copy: bool = False
    ) -> tuple: ...


class GeneratorExecutor(Protocol):
    """What these functions need of the executor."""

    host: _Host

    def _register_caller_as_borrower(self, inner: list, caller: Any) -> None: ...
    def _task_error(self, spec: TaskSpec, e: BaseException) -> BaseException: ...


def run(executor: GeneratorExecutor, spec: TaskSpec, result: Any) -> Any:
    """On the executing thread: runs the generator ``result`` to its end; returns the
    task's return value (a tuple of N for static returns)."""
    if inspect.isasyncgen(result):
        return asyncio.run(run_async(executor, spec, result))
    _check_iterable(spec, result)
    if spec.generator == GEN_STATIC:
        values: list = []
        try:
            values.extend(itertools.islice(result, max(spec.num_returns, 0) + 1))
        except Exception as e:
            return _static_failed(values, e)
        return _static(spec, values)
    sender = _Sender(executor, spec)
    try:
        for value in result:
            sender.item(value)
    except Exception as e:
        sender.raised(e)
    finally:
        sender.flush()
    return sender.result()


async def run_async(executor: GeneratorExecutor, spec: TaskSpec, result: Any) -> Any:
    """``run`` on an event loop (an async actor's): async generators are awaited on it; a
    plain one is ``run``'s."""
    if not inspect.isasyncgen(result):
        return run(executor, spec, result)
    if spec.generator == GEN_STATIC:
        wanted = max(spec.num_returns, 0) + 1
        values = []
        try:
            async for value in result:
                values.append(value)
                if len(values) >= wanted:
                    break
        except Exception as e:
            return _static_failed(values, e)
        return _static(spec, values)
    sender = _Sender(executor, spec)
    try:
        async for value in result:
            sender.item(value)
    except Exception as e:
        sender.raised(e)
    finally:
        sender.flush()
    return sender.result()


def _check_iterable(spec: TaskSpec, result: Any) -> None:
    if not hasattr(result, "__iter__"):
        raise TypeError(
            f"{spec.display_name()}() was declared a generator (num_returns="
            f"{'dynamic' if spec.generator == GEN_DYNAMIC else 'streaming'}) but returned "
            f"a {type(result).__name__}, which is not iterable."
        )


class PartialReturns:
    """A static generator that yielded ``values`` and then raised ``error``: as in Ray, the
    first returns hold the values and the rest the task's error."""

    def __init__(self, values: list, error: Exception) -> None:
        self.values = values
        self.error = error


def _static_failed(values: list, error: Exception) -> PartialReturns:
    if not values:
        raise error  # nothing yielded: the task's plain error, retried as any
    return PartialReturns(values, error)


def _static(spec: TaskSpec, values: list) -> Any:
    """A generator with ``num_returns=N``: its N items are the N returns."""
    n = spec.num_returns
    if len(values) > n:
        # Ray logs this on the worker and keeps the first N; here the caller learns it.
        raise ValueError(f"Task returned more than num_returns={n} objects.")
    if len(values) < n:
        raise ValueError(f"Task returned {len(values)} objects, but num_returns={n}.")
    if n == 1:
        return values[0]
    return tuple(values) if n else None


class _Sender:
    """Stores a streaming or dynamic task's items and sends each to the caller."""

    def __init__(self, executor: GeneratorExecutor, spec: TaskSpec) -> None:
        self.executor = executor
        self.host = executor.host
        self.spec = spec
        # Set by the core worker when the push came in: the connection to answer on.
        self.conn = spec.__dict__.get("stream_conn")
        self.dynamic = spec.generator == GEN_DYNAMIC
        self.index = 0
        self.via_loop = False
        self.refs: list[ObjectRef] = []  # dynamic: every item's ref, for the return value

    def item(self, value: Any) -> None:
        spec = self.spec
        index = self.index
        self.index += 1
        oid = item_id(spec.task_id, index)
        if self.dynamic:
            # Uncounted here: the caller owns it; the return value carries the ref.
            self.refs.append(ObjectRef(oid, spec.owner, _count=False))
        elif index < spec.generator_skip:
            return  # an earlier attempt delivered it
        ser = serialize(value, what=f"item {index} of {spec.display_name()}()")
        loc = self.host.store_serialized(oid, ser, spec.owner)
        if ser.contained:
            task_values.register_caller_as_borrower(self.executor.host, ser.contained, spec.owner)
        self._send(index, loc, ser.contained or None)

    def raised(self, e: Exception) -> None:
        """The generator raised: a dynamic task's last item is the error (as in Ray); a
        streaming task fails with it and its owner decides (retry, or the last item)."""
        if not self.dynamic or isinstance(e, TaskCancelledError):
            raise e
        index = self.index
        self.index += 1
        oid = item_id(self.spec.task_id, index)
        self.refs.append(ObjectRef(oid, self.spec.owner, _count=False))
        self._send(index, error_location(self.executor._task_error(self.spec, e)), None)

    def _send(self, index: int, loc: tuple, contained: list | None) -> None:
        body = {"task_id": self.spec.task_id, "index": index, "loc": loc, "contained": contained}
        if self.dynamic:
            body["dynamic"] = True
        conn = self.conn
        if conn is None:
            raise RuntimeError(f"{self.spec.display_name()}(): no connection to its caller")
        if not self.via_loop and conn.send_direct("generator_item", body):
            return
        self.via_loop = True  # from now on in order behind this one
        conn.send_threadsafe("generator_item", body)

    def flush(self) -> None:
        """Waits until the items sent through the I/O loop are written (see the module doc)."""
        if self.via_loop:
            self.host.run_sync(_nothing(), 30.0)

    def result(self) -> Any:
        return DynamicObjectRefGenerator(self.refs) if self.dynamic else None


async def _nothing() -> None:
    """Runs on the I/O loop after every callback queued before it."""
