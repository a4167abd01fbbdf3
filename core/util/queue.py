"""``ember.util.queue``: a first-in, first-out queue shared by tasks, actors and drivers
(Ray's ``ray.util.queue``).

The items live in one async actor; a ``Queue`` object is a thin client holding its handle,
so it pickles into tasks and actors like any handle and every copy reaches the same items.
A blocking ``get``/``put`` waits inside the actor (one coroutine per waiting caller), so a
waiting consumer costs no polling.

The actor answers "full" and "empty" with a status instead of raising: the caller then
raises a plain ``Full``/``Empty`` of its own, with no remote traceback attached (Ray raises
them wrapped in a task error; ``except Full``/``except Empty`` work the same on both).
"""

from __future__ import annotations

import asyncio
import functools
import queue as _stdlib_queue
from collections.abc import Iterable
from typing import Any

import ember

__all__ = ["Empty", "Full", "Queue"]


class Empty(_stdlib_queue.Empty):
    """Raised by ``get`` on an empty queue (when not blocking, or when the wait timed out).

    A ``queue.Empty``, as Ray's is, so code written for the standard library catches it."""


class Full(_stdlib_queue.Full):
    """Raised by ``put`` on a full queue (when not blocking, or when the wait timed out)."""


class Queue:
    """A FIFO queue on an actor.

    Args:
        maxsize: the most items the queue holds; 0 (or less) is unbounded.
        actor_options: passed to the queue actor's ``.options(...)`` (resources, name,
            lifetime, scheduling strategy, ...).

    >>> q = Queue(maxsize=2)
    >>> q.put(1); q.put(2)
    >>> q.put(3, block=False)   # raises Full
    """

    def __init__(self, maxsize: int = 0, actor_options: dict[str, Any] | None = None) -> None:
        self.maxsize = maxsize
        self.actor = _actor_class().options(**(actor_options or {})).remote(maxsize)

    def __len__(self) -> int:
        return self.size()

    def __repr__(self) -> str:
        return f"Queue(maxsize={self.maxsize})"

    # -- state -------------------------------------------------------------------------
    def size(self) -> int:
        """The number of items in the queue now."""
        return ember.get(self._handle().qsize.remote())

    def qsize(self) -> int:
        """The number of items in the queue now (``size()``)."""
        return self.size()

    def empty(self) -> bool:
        return ember.get(self._handle().empty.remote())

    def full(self) -> bool:
        return ember.get(self._handle().full.remote())

    # -- put -----------------------------------------------------------------------------
    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Adds ``item``. On a full queue: with ``block``, waits for room (at most
        ``timeout`` seconds, then raises Full); without, raises Full at once."""
        _raise_unless(ember.get(self._put_ref(item, block, timeout)), Full)

    async def put_async(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """``put`` for asyncio code: awaits the actor instead of blocking the loop."""
        _raise_unless(await self._put_ref(item, block, timeout), Full)

    def put_nowait(self, item: Any) -> None:
        """``put(item, block=False)``."""
        self.put(item, block=False)

    def put_nowait_batch(self, items: Iterable[Any]) -> None:
        """Adds all of ``items`` in order, or none of them (Full) when they do not all fit."""
        if not isinstance(items, Iterable):
            raise TypeError("Argument 'items' must be an Iterable")
        _raise_unless(ember.get(self._handle().put_nowait_batch.remote(list(items))), Full)

    def _put_ref(self, item: Any, block: bool, timeout: float | None) -> ember.ObjectRef:
        if not block:
            return self._handle().put_nowait.remote(item)
        _check_timeout(timeout)
        return self._handle().put.remote(item, timeout)

    # -- get -----------------------------------------------------------------------------
    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Removes and returns the oldest item. On an empty queue: with ``block``, waits for
        one (at most ``timeout`` seconds, then raises Empty); without, raises Empty at once."""
        return _item_or_raise(ember.get(self._get_ref(block, timeout)))

    async def get_async(self, block: bool = True, timeout: float | None = None) -> Any:
        """``get`` for asyncio code: awaits the actor instead of blocking the loop."""
        return _item_or_raise(await self._get_ref(block, timeout))

    def get_nowait(self) -> Any:
        """``get(block=False)``."""
        return self.get(block=False)

    def get_nowait_batch(self, num_items: int) -> list[Any]:
        """Removes and returns the ``num_items`` oldest items, or none of them (Empty) when the
        queue holds fewer."""
        if not isinstance(num_items, int):
            raise TypeError("Argument 'num_items' must be an int")
        if num_items < 0:
            raise ValueError("'num_items' must be nonnegative")
        return _item_or_raise(ember.get(self._handle().get_nowait_batch.remote(num_items)))

    def _get_ref(self, block: bool, timeout: float | None) -> ember.ObjectRef:
        if not block:
            return self._handle().get_nowait.remote()
        _check_timeout(timeout)
        return self._handle().get.remote(timeout)

    # -- end -----------------------------------------------------------------------------
    def shutdown(self, force: bool = False, grace_period_s: float = 5) -> None:
        """Ends the queue's actor and frees its resources; the items are lost.

        ``force`` kills it at once; otherwise it exits after the calls it already received
        have started, and is killed if it has not gone within ``grace_period_s`` seconds.
        Callers still blocked in ``get``/``put`` then fail with ActorDiedError."""
        actor, self.actor = self.actor, None
        if actor is None:
            return
        if not force:
            done = actor.exit.remote()
            ready, _ = ember.wait([done], timeout=grace_period_s)
            if ready:
                return
        ember.kill(actor, no_restart=True)

    def _handle(self) -> Any:
        if self.actor is None:
            raise RuntimeError("this Queue was shut down (Queue.shutdown() was called)")
        return self.actor


@functools.cache
def _actor_class() -> Any:
    """The remote class, made once: every Queue of this process then shares its export."""
    return ember.remote(_QueueActor)


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")


def _raise_unless(answer: str | None, error: type[Exception]) -> None:
    """The actor answers None for done, or the reason it could not."""
    if answer is not None:
        raise error(answer) if answer else error()


def _item_or_raise(answer: tuple[bool, Any]) -> Any:
    ok, value = answer
    if not ok:
        raise Empty(value) if value else Empty()
    return value


class _QueueActor:
    """The queue's items, served to every handle. Every method is a coroutine, so all run on
    the actor's event loop, one at a time between awaits: no locks are needed."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.queue: asyncio.Queue[Any] = asyncio.Queue(maxsize)

    async def qsize(self) -> int:
        return self.queue.qsize()

    async def empty(self) -> bool:
        return self.queue.empty()

    async def full(self) -> bool:
        return self.queue.full()

    async def put(self, item: Any, timeout: float | None) -> str | None:
        # Room now wins even with timeout=0: asyncio.wait_for(..., 0) gives up before the
        # put runs, so a zero timeout would refuse a queue that has space.
        if not self.queue.full():
            self.queue.put_nowait(item)
            return None
        try:
            await asyncio.wait_for(self.queue.put(item), timeout)
        except TimeoutError:
            return ""
        return None

    async def put_nowait(self, item: Any) -> str | None:
        if self.queue.full():
            return ""
        self.queue.put_nowait(item)
        return None

    async def put_nowait_batch(self, items: list[Any]) -> str | None:
        size = self.queue.qsize()
        if self.maxsize > 0 and size + len(items) > self.maxsize:
            return (
                f"Cannot add {len(items)} items to queue of size {size} and maxsize {self.maxsize}."
            )
        for item in items:
            self.queue.put_nowait(item)
        return None

    async def get(self, timeout: float | None) -> tuple[bool, Any]:
        if not self.queue.empty():  # as in put: an item now wins even with timeout=0
            return True, self.queue.get_nowait()
        try:
            return True, await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return False, ""

    async def get_nowait(self) -> tuple[bool, Any]:
        if self.queue.empty():
            return False, ""
        return True, self.queue.get_nowait()

    async def get_nowait_batch(self, num_items: int) -> tuple[bool, Any]:
        size = self.queue.qsize()
        if num_items > size:
            return False, f"Cannot get {num_items} items from queue of size {size}."
        return True, [self.queue.get_nowait() for _ in range(num_items)]

    async def exit(self) -> None:
        ember.actor.exit_actor()
