"""What a generator task returns to its caller, as in Ray 2.x.

- ``ObjectRefGenerator``: a streaming task's items (``num_returns="streaming"``, the default
  of a generator function or method). ``next(gen)`` (and ``for``, ``await gen.__anext__()``,
  ``async for``) gives each item's ref as soon as the task yielded it; at the end,
  StopIteration. An exception raised in the task is the item after the last it yielded; a
  task that died (its worker crashed, it was cancelled) ends the stream with ``completed()``,
  whose ``get`` raises why, as Ray does. Dropping the generator frees the items it never
  handed out. It cannot be pickled (it is its owner's view of the stream).
- ``DynamicObjectRefGenerator``: the value of a ``num_returns="dynamic"`` task's one ref:
  the refs of everything it yielded.

The items live in the owner's core worker (``core_worker/generator_streams.py``); this
module is the user's side of it and talks to it through the worker, by duck typing, so it
sits at the bottom of the layers beside ``ObjectRef``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterable, Iterator
from typing import Any

from ember.core_worker.task_spec import GEN_DYNAMIC, GEN_STATIC, GEN_STREAMING, TaskSpec
from ember.object_ref import ObjectRef

STREAMING, DYNAMIC = "streaming", "dynamic"


def generator_mode(num_returns: Any) -> tuple[int, int]:
    """A generator function's ``num_returns`` as ``(returns, TaskSpec.generator)``: one ref
    (the task's own) for streaming and dynamic, else one ref per item."""
    if num_returns is None or num_returns == STREAMING:
        return 1, GEN_STREAMING
    if num_returns == DYNAMIC:
        return 1, GEN_DYNAMIC
    return num_returns, GEN_STATIC


def check_generator_returns(num_returns: Any, is_generator: bool, what: str) -> None:
    """Ray's rule: streaming and dynamic returns need a generator function."""
    if num_returns in (STREAMING, DYNAMIC) and not is_generator:
        raise ValueError(
            f"num_returns={num_returns!r} can only be used with generator functions "
            f"(functions that use 'yield'); {what} is not a generator function."
        )


def submit_generator(worker: Any, spec: TaskSpec, submit: Any) -> Any:
    """Submits a generator task (``submit``: the worker's ``submit_task`` or
    ``submit_actor_task``) and returns what its caller gets."""
    mode = spec.generator
    stream = worker.streams.open(spec) if mode == GEN_STREAMING else None
    refs = submit(spec)
    if stream is not None:
        return ObjectRefGenerator(refs[0], worker, stream)
    if mode == GEN_DYNAMIC or spec.num_returns == 1:
        return refs[0]
    return refs if spec.num_returns != 0 else None


class DynamicObjectRefGenerator:
    """The refs of a dynamic generator task's items, in order; iterating consumes them."""

    def __init__(self, refs: Iterable[ObjectRef]) -> None:
        self._refs: collections.deque[ObjectRef] = collections.deque(refs)

    def __iter__(self) -> Iterator[ObjectRef]:
        while self._refs:
            yield self._refs.popleft()

    def __len__(self) -> int:
        return len(self._refs)

    def __repr__(self) -> str:
        return f"DynamicObjectRefGenerator({len(self._refs)} refs)"


class ObjectRefGenerator:
    """The refs of a streaming task's items, each available as soon as it was yielded.

    Not thread-safe (as Ray's): one consumer at a time.
    """

    def __init__(
        self, generator_ref: ObjectRef, worker: Any, stream: Any, streams: Any = None
    ) -> None:
        # The task's own return: ready when the task ends; holds its error if it died.
        self._generator_ref = generator_ref
        self._worker = worker
        # Where the stream's items are (the core worker's; local mode brings its own).
        self._streams = worker.streams if streams is None else streams
        self._stream = stream
        self._task_id = generator_ref.task_id()
        self._generator_task_raised = False

    # -- the generator protocols -----------------------------------------------------------
    def __iter__(self) -> ObjectRefGenerator:
        return self

    def __next__(self) -> ObjectRef:
        return self._next_sync()

    def __aiter__(self) -> ObjectRefGenerator:
        return self

    async def __anext__(self) -> ObjectRef:
        return await self._next_async()

    def send(self, value: Any) -> Any:
        raise NotImplementedError("`gen.send` is not supported.")

    def throw(self, *args: Any) -> Any:
        raise NotImplementedError("`gen.throw` is not supported.")

    def close(self) -> None:
        raise NotImplementedError("`gen.close` is not supported.")

    async def asend(self, value: Any) -> Any:
        raise NotImplementedError("`gen.asend` is not supported.")

    async def athrow(self, *args: Any) -> Any:
        raise NotImplementedError("`gen.athrow` is not supported.")

    async def aclose(self) -> None:
        raise NotImplementedError("`gen.aclose` is not supported.")

    # -- Ray's inspection methods ----------------------------------------------------------
    def completed(self) -> ObjectRef:
        """A ref ready once the task ended; its ``get`` raises if the task died."""
        return self._generator_ref

    def next_ready(self) -> bool:
        """Whether ``next(gen)`` would return at once (False at the end: see is_finished)."""
        if self.is_finished():
            return False
        ready, probe = self._streams.peek(self._stream)
        return ready

    def is_finished(self) -> bool:
        """Whether the task ended and every ref was handed out: ``next`` would stop."""
        if not self._streams.finished(self._stream):
            return False
        if self._generator_task_raised:
            return True
        try:
            self._worker.get([self._generator_ref])
        except Exception:
            return False  # its error is still to be handed out
        return True

    def _ready_probe(self) -> ObjectRef:
        """A ref ``wait`` can watch: ready once ``next`` would return at once."""
        return self._streams.peek(self._stream)[1]

    # -- taking the next ref ---------------------------------------------------------------
    def _next_sync(self, timeout_s: float | None = None) -> ObjectRef:
        """The next ref; ``ObjectRef.nil()`` if none came within ``timeout_s``."""
        ready, probe = self._streams.peek(self._stream)
        if not ready:
            # wait() lends this worker's CPU while it blocks, as get() does (a task that
            # consumes another's stream on a full node would deadlock otherwise).
            done, _ = self._worker.wait([probe], 1, timeout_s, False)
            if not done:
                return ObjectRef.nil()
        ref = self._streams.take(self._stream)
        if ref is not None:
            return ref
        if self._generator_task_raised:
            raise StopIteration
        try:
            self._worker.get([self._generator_ref])
        except Exception:
            # The task died: its own return says why, once; then the stream is over.
            self._generator_task_raised = True
            return self._generator_ref
        raise StopIteration

    async def _next_async(self, timeout_s: float | None = None) -> ObjectRef:
        ready, probe = self._streams.peek(self._stream)
        if not ready:
            fut = asyncio.wrap_future(self._worker.object_future(probe))
            if timeout_s is None:
                await fut
            else:
                done, _ = await asyncio.wait([fut], timeout=timeout_s)
                if not done:
                    fut.cancel()
                    return ObjectRef.nil()
        ref = self._streams.take(self._stream)
        if ref is not None:
            return ref
        if self._generator_task_raised:
            raise StopAsyncIteration
        try:
            await asyncio.wrap_future(self._worker.object_future(self._generator_ref))
        except Exception:
            self._generator_task_raised = True
            return self._generator_ref
        raise StopAsyncIteration

    # -- lifetime --------------------------------------------------------------------------
    def __del__(self) -> None:
        # No lock here (the garbage collector may run this inside a locked section): the
        # I/O thread frees what was never handed out.
        try:
            loop = self._worker.loop
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._streams.drop, self._task_id)
        except Exception:  # interpreter or worker shutdown: nothing left to free
            pass

    def __reduce__(self) -> Any:
        raise TypeError(
            "You cannot return or pass a generator to other task. "
            "Serializing a ObjectRefGenerator is not allowed."
        )

    def __repr__(self) -> str:
        return f"ObjectRefGenerator({self._task_id.hex()})"


# Ray's older names for it.
StreamingObjectRefGenerator = ObjectRefGenerator
