"""``ActorPool``: schedule work over a fixed set of actors, as ``ray.util.ActorPool`` does.

Written only against the public API (``ember.wait``, ``ember.get``), so it behaves the same
whichever runtime sits underneath.

Rules the pool keeps (the same as Ray's):

- ``fn(actor, value)`` must return an ``ObjectRef`` (or a list of them, for a method with
  several return values); the actor counts as busy until that result has been taken with
  ``get_next``/``get_next_unordered``, not merely until it is computed.
- Work submitted while every actor is busy waits in a queue and starts, in submission
  order, as soon as a result is taken and its actor comes back.
- Results are numbered in submission order. ``get_next`` returns them in that order;
  ``get_next_unordered`` returns whichever is ready first, and after it ``get_next`` may no
  longer be used for the results it skipped.
- A timed-out result stays pending unless ``ignore_if_timedout`` is set; then it is dropped
  and its actor goes back to the pool (any later call on it queues behind the dropped one).
- An actor whose result fails with ``ActorDiedError`` is not put back in the pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import ember

V = TypeVar("V")

# What ``fn`` returns: one ObjectRef, or a list of them. Lists are stored as tuples so they
# can key a dict.
_Future = Any

_TIMEOUT_MSG = "Timed out waiting for result"


def _refs(future: _Future) -> list[Any]:
    return list(future) if isinstance(future, list | tuple) else [future]


def _key(future: _Future) -> _Future:
    return tuple(future) if isinstance(future, list) else future


def _is_actor_died(error: BaseException) -> bool:
    # Looked up at call time: the runtime's exceptions module loads with the runtime.
    died = getattr(getattr(ember, "exceptions", None), "ActorDiedError", None)
    return died is not None and isinstance(error, died)


class ActorPool:
    """Runs ``fn(actor, value)`` calls over a fixed pool of actors.

    Example::

        @ember.remote
        class Actor:
            def double(self, v):
                return 2 * v

        pool = ActorPool([Actor.remote(), Actor.remote()])
        print(list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4])))
        # [2, 4, 6, 8]
    """

    def __init__(self, actors: list[Any]) -> None:
        self._idle_actors: list[Any] = list(actors)
        # {future key: (submission index, actor)} for every result not yet returned.
        self._future_to_actor: dict[_Future, tuple[int, Any]] = {}
        # {submission index: future as fn returned it}
        self._index_to_future: dict[int, _Future] = {}
        self._next_task_index = 0
        self._next_return_index = 0
        # [(fn, value)] waiting for an actor, oldest first.
        self._pending_submits: list[tuple[Callable[[Any, Any], Any], Any]] = []

    # ----------------------------------------------------------------------------- map

    def map(self, fn: Callable[[Any, V], Any], values: Iterable[V]) -> Iterator[Any]:
        """Applies ``fn`` over ``values`` in parallel; yields results in input order.

        Results of earlier submissions that were never taken are discarded first. The work
        is submitted at once (eagerly); iterate the returned generator to collect it.
        """
        self._discard_pending()
        for v in values:
            self.submit(fn, v)

        def results() -> Iterator[Any]:
            while self.has_next():
                yield self.get_next()

        return results()

    def map_unordered(self, fn: Callable[[Any, V], Any], values: Iterable[V]) -> Iterator[Any]:
        """Like ``map`` but yields each result as soon as it is ready, in any order."""
        self._discard_pending()
        for v in values:
            self.submit(fn, v)

        def results() -> Iterator[Any]:
            while self.has_next():
                yield self.get_next_unordered()

        return results()

    def _discard_pending(self) -> None:
        # Drop the results earlier submit() calls left behind, without waiting for them: a
        # finished one is read only to learn whether its actor died, and its error (if any)
        # is discarded with it. Queued submissions still start as actors come back, as in
        # Ray, and their results are dropped in turn.
        while self.has_next():
            index = min(i for i, _ in self._future_to_actor.values())
            future = self._index_to_future.pop(index)
            _, actor = self._future_to_actor.pop(_key(future))
            alive = True
            if self._all_ready(future, 0):
                try:
                    ember.get(future)
                except Exception as e:
                    alive = not _is_actor_died(e)
            self._return_actor(actor, alive=alive)
        self._next_return_index = self._next_task_index

    # -------------------------------------------------------------------------- submit

    def submit(self, fn: Callable[[Any, V], Any], value: V) -> None:
        """Schedules ``fn(actor, value)`` on an idle actor, or queues it until one is free.

        Take the result with ``get_next()`` or ``get_next_unordered()``.
        """
        if not self._idle_actors:
            self._pending_submits.append((fn, value))
            return
        actor = self._idle_actors.pop()
        future = fn(actor, value)
        self._future_to_actor[_key(future)] = (self._next_task_index, actor)
        self._index_to_future[self._next_task_index] = future
        self._next_task_index += 1

    def has_next(self) -> bool:
        """Whether any submitted result has not been returned yet."""
        return bool(self._future_to_actor)

    # ------------------------------------------------------------------------ get_next

    def get_next(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """Returns the next result in submission order, waiting up to ``timeout`` seconds.

        Raises ``StopIteration`` when nothing is pending and ``TimeoutError`` on timeout. With
        ``ignore_if_timedout`` the late result is dropped (its actor rejoins the pool) before
        ``TimeoutError`` is raised; without it the result stays next in line.
        """
        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered().")
        future = self._index_to_future[self._next_return_index]
        timed_out = timeout is not None and not self._all_ready(future, timeout)
        if timed_out and not ignore_if_timedout:
            raise TimeoutError(_TIMEOUT_MSG)

        del self._index_to_future[self._next_return_index]
        self._next_return_index += 1
        _, actor = self._future_to_actor.pop(_key(future))
        if timed_out:
            self._return_actor(actor)
            raise TimeoutError(f"{_TIMEOUT_MSG}. The task {future} has been ignored.")
        return self._take_result(future, actor)

    def get_next_unordered(
        self, timeout: float | None = None, ignore_if_timedout: bool = False
    ) -> Any:
        """Returns whichever pending result is ready first, waiting up to ``timeout`` seconds.

        Raises ``StopIteration`` when nothing is pending and ``TimeoutError`` on timeout. With
        ``ignore_if_timedout`` the oldest pending result is dropped (its actor rejoins the
        pool) before ``TimeoutError`` is raised.
        """
        if not self.has_next():
            raise StopIteration("No more results to get")
        key = self._first_ready(list(self._future_to_actor), timeout)
        timed_out = key is None
        if timed_out:
            if not ignore_if_timedout:
                raise TimeoutError(_TIMEOUT_MSG)
            key = min(self._future_to_actor, key=lambda k: self._future_to_actor[k][0])

        index, actor = self._future_to_actor.pop(key)
        future = self._index_to_future.pop(index)
        self._next_return_index = max(self._next_return_index, index + 1)
        if timed_out:
            self._return_actor(actor)
            raise TimeoutError(f"{_TIMEOUT_MSG}. The task {future} has been ignored.")
        return self._take_result(future, actor)

    # -------------------------------------------------------------------- idle actors

    def has_free(self) -> bool:
        """Whether an actor is idle and no submitted work is waiting for one."""
        return bool(self._idle_actors) and not self._pending_submits

    def pop_idle(self) -> Any | None:
        """Removes and returns an idle actor, or ``None`` if none is free.

        An actor whose result has not been taken yet is busy, so it is never popped.
        """
        if self.has_free():
            return self._idle_actors.pop()
        return None

    def push(self, actor: Any) -> None:
        """Adds an actor to the pool; it picks up queued work at once if there is any.

        Raises ``ValueError`` if the actor already belongs to the pool (idle or busy).
        """
        busy = [a for _, a in self._future_to_actor.values()]
        if any(actor == a for a in self._idle_actors) or any(actor == a for a in busy):
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)

    # ------------------------------------------------------------------------ helpers

    def _take_result(self, future: _Future, actor: Any) -> Any:
        alive = True
        try:
            return ember.get(future)
        except Exception as e:
            alive = not _is_actor_died(e)
            raise
        finally:
            self._return_actor(actor, alive=alive)

    def _return_actor(self, actor: Any, alive: bool = True) -> None:
        if alive:
            self._idle_actors.append(actor)
        if self._pending_submits and self._idle_actors:
            fn, value = self._pending_submits.pop(0)
            self.submit(fn, value)

    @staticmethod
    def _all_ready(future: _Future, timeout: float) -> bool:
        refs = _refs(future)
        ready, _ = ember.wait(refs, num_returns=len(refs), timeout=timeout)
        return len(ready) == len(refs)

    @staticmethod
    def _first_ready(keys: list[_Future], timeout: float | None) -> _Future | None:
        """The first of ``keys`` (in submission order) whose refs are all ready, or None."""
        owner: dict[Any, _Future] = {}
        waiting: dict[_Future, int] = {}
        for key in keys:
            refs = _refs(key)
            waiting[key] = len(refs)
            for ref in refs:
                owner[ref] = key
        outstanding = list(owner)
        deadline = None if timeout is None else time.monotonic() + timeout
        while outstanding:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, outstanding = ember.wait(outstanding, num_returns=1, timeout=remaining)
            if not ready:
                return None
            # One wait may report several refs; take the earliest complete future.
            done = []
            for ref in ready:
                key = owner[ref]
                waiting[key] -= 1
                if waiting[key] == 0:
                    done.append(key)
            if done:
                return min(done, key=keys.index)
            if deadline is not None and time.monotonic() >= deadline:
                return None
        return None
