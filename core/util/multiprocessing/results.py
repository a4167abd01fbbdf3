"""What a ``Pool`` call hands back: ``AsyncResult`` (apply_async, map_async, starmap_async)
and the iterators of ``imap``/``imap_unordered``, plus how one item's failure travels.

Both are *jobs* to the pool's scheduler (``ember.util.multiprocessing.pool``): it asks a job
for its next chunk of items when an actor has room, and tells it when a chunk is done. Chunk
completions arrive on the pool's dispatcher thread, never on Ember's I/O thread, so user
callbacks may block briefly or submit more work.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing import TimeoutError
from typing import Any

import cloudpickle

logger = logging.getLogger(__name__)

# One item of a chunk: positional and keyword arguments.
Item = tuple[tuple[Any, ...], dict[str, Any]]


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a pool's worker: set as that exception's
    ``__cause__`` where it is re-raised, as ``multiprocessing.Pool`` does."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class PoolTaskError(Exception):
    """What ``imap``/``imap_unordered`` hand back for an item whose call raised (Ray's rule,
    not ``multiprocessing``'s, which raises it): the iteration goes on, and ``underlying``
    is the item's exception."""

    def __init__(self, underlying: BaseException) -> None:
        super().__init__(underlying)
        self.underlying = underlying


class ItemFailure:
    """An item whose call raised: kept apart from values, so a function that *returns* an
    exception object is not mistaken for one that raised it."""

    __slots__ = ("error", "text")

    def __init__(self, error: BaseException, text: str) -> None:
        self.error = error
        self.text = text

    @classmethod
    def capture(cls, error: BaseException) -> ItemFailure:
        """In the worker: the error and its traceback, or a stand-in when the error itself
        cannot be pickled (the whole chunk's reply would fail otherwise)."""
        text = "".join(traceback.format_exception(error))
        try:
            cloudpickle.dumps(error)
        except Exception as e:  # noqa: BLE001 - any pickling failure means the same
            error = RuntimeError(f"{error!r} (its exception could not be pickled: {e})")
        return cls(error, text)

    def raised(self) -> BaseException:
        """In the caller: the error, its worker's traceback attached as its cause."""
        if self.text and self.error.__cause__ is None:
            self.error.__cause__ = RemoteTraceback(f'\n"""\n{self.text}"""')
        return self.error


class Job:
    """Work a pool's scheduler feeds to its actors, chunk by chunk (see the module doc)."""

    func: Callable[..., Any]
    keepalive: Any = None  # the pool, while this job has work in it

    def next_chunk(self) -> tuple[int, list[Item]] | None:
        """The next chunk to send, or None for none now."""
        raise NotImplementedError

    def exhausted(self) -> bool:
        """True once every chunk has been handed out: the scheduler forgets the job."""
        raise NotImplementedError

    def chunk_done(self, index: int, outcomes: list[Any] | None, error: BaseException | None):
        """Chunk ``index`` finished: one outcome per item, or ``error`` for the whole chunk."""
        raise NotImplementedError

    def abandon(self, error: BaseException) -> None:
        """The pool was terminated: chunks never sent fail with ``error``."""
        raise NotImplementedError


class AsyncResult(Job):
    """The result of ``apply_async``, ``map_async`` and ``starmap_async``
    (``multiprocessing.pool.AsyncResult``)."""

    def __init__(
        self,
        func: Callable[..., Any],
        chunks: list[list[Item]],
        callback: Callable[[Any], Any] | None = None,
        error_callback: Callable[[BaseException], Any] | None = None,
        single: bool = False,
    ) -> None:
        self.func = func
        self._chunks = chunks
        self._sizes = [len(c) for c in chunks]
        self._sent = 0
        self._outcomes: list[list[Any] | None] = [None] * len(chunks)
        self._left = len(chunks)
        self._callback = callback
        self._error_callback = error_callback
        self._single = single
        self._first_error: BaseException | None = None
        self._lock = threading.Lock()
        self._ready = threading.Event()
        if not chunks:
            self._finish()

    # -- the scheduler's side --------------------------------------------------------------
    def next_chunk(self) -> tuple[int, list[Item]] | None:
        if self._sent == len(self._chunks):
            return None
        index = self._sent
        chunk = self._chunks[index]
        self._chunks[index] = []  # sent: the arguments need not stay here
        self._sent += 1
        return index, chunk

    def exhausted(self) -> bool:
        return self._sent == len(self._chunks)

    def chunk_done(self, index: int, outcomes: list[Any] | None, error: BaseException | None):
        if error is not None:  # the chunk's call failed (its actor died): each item did
            outcomes = [ItemFailure(error, "")] * self._sizes[index]
        with self._lock:
            self._outcomes[index] = outcomes
            self._left -= 1
            first_failure = self._first_error is None and next(
                (o for o in outcomes if isinstance(o, ItemFailure)), None
            )
            if first_failure:
                self._first_error = first_failure.raised()
            finished = self._left == 0
        # Outside the lock: a callback may take its time or touch this result.
        if first_failure and self._error_callback is not None:
            _call_back(self._error_callback, self._first_error)
        if finished:
            self._finish()

    def abandon(self, error: BaseException) -> None:
        for index in range(self._sent, len(self._chunks)):
            self._sent += 1
            self.chunk_done(index, None, error)

    def _finish(self) -> None:
        if self._first_error is None and self._callback is not None:
            values = self._values()
            _call_back(self._callback, values[0] if self._single else values)
        self.keepalive = None
        self._ready.set()

    def _values(self) -> list[Any]:
        return list(itertools.chain.from_iterable(o or () for o in self._outcomes))

    # -- the caller's side -----------------------------------------------------------------
    def ready(self) -> bool:
        """Whether every item has finished."""
        return self._ready.is_set()

    def wait(self, timeout: float | None = None) -> None:
        """Waits until ready, at most ``timeout`` seconds (no error when it runs out)."""
        self._ready.wait(timeout)

    def successful(self) -> bool:
        """Whether no item raised; ValueError before the result is ready."""
        if not self.ready():
            raise ValueError(f"{self!r} not ready")
        return self._first_error is None

    def get(self, timeout: float | None = None) -> Any:
        """The result (a list, or the one value of ``apply_async``). Raises the error of the
        first item that raised, in the items' order; ``multiprocessing.TimeoutError`` when
        not ready within ``timeout`` seconds."""
        if not self._ready.wait(timeout):
            raise TimeoutError
        values = self._values()
        for value in values:
            if isinstance(value, ItemFailure):
                raise value.raised()
        return values[0] if self._single else values


class IMapIterator(Job):
    """The iterator of ``imap`` (results in the items' order) and ``imap_unordered`` (in the
    order they finish). Reads its input lazily: at most ``window`` chunks are sent ahead of
    what the consumer has taken, so an endless input or a slow consumer holds little."""

    def __init__(
        self,
        func: Callable[..., Any],
        source: Iterator[Any],
        chunksize: int,
        star: bool,
        ordered: bool,
        window: int,
        poke: Callable[[], None],
    ) -> None:
        self.func = func
        self._source = source
        self._chunksize = chunksize
        self._star = star
        self._ordered = ordered
        self._window = window
        self._poke = poke  # asks the pool to send more once the consumer took a chunk
        self._sent = 0
        self._sizes: dict[int, int] = {}  # chunks sent and not yet done: their sizes
        self._taken = 0  # chunks moved to the consumer's buffer
        self._source_done = False
        self._source_error: BaseException | None = None
        self._done: dict[int, list[Any]] = {}  # ordered: finished chunks by index
        self._arrived: collections.deque[list[Any]] = collections.deque()  # unordered
        self._buffer: collections.deque[Any] = collections.deque()
        self._cond = threading.Condition()

    # -- the scheduler's side --------------------------------------------------------------
    def next_chunk(self) -> tuple[int, list[Item]] | None:
        with self._cond:
            if self._source_done or self._sent - self._taken >= self._window:
                return None
        try:
            batch = list(itertools.islice(self._source, self._chunksize))
        except Exception as e:  # noqa: BLE001 - the input's own error, raised to the consumer
            batch, error = [], e
        else:
            error = None
        with self._cond:
            if len(batch) < self._chunksize:
                self._source_done = True
                self._source_error = error
                self._cond.notify_all()
            if not batch:
                return None
            index = self._sent
            self._sent += 1
            self._sizes[index] = len(batch)
        return index, [((*args,) if self._star else (args,), {}) for args in batch]

    def exhausted(self) -> bool:
        with self._cond:
            return self._source_done

    def chunk_done(self, index: int, outcomes: list[Any] | None, error: BaseException | None):
        with self._cond:
            if error is not None:  # the chunk's call failed (its actor died): each item did
                outcomes = [ItemFailure(error, "")] * self._sizes.pop(index)
            else:
                self._sizes.pop(index)
            if self._ordered:
                self._done[index] = outcomes
            else:
                self._arrived.append(outcomes)
            self._cond.notify_all()

    def abandon(self, error: BaseException) -> None:
        with self._cond:
            self._source_done = True
            if self._source_error is None:
                self._source_error = error
            self._cond.notify_all()

    # -- the consumer's side ---------------------------------------------------------------
    def __iter__(self) -> IMapIterator:
        return self

    def __next__(self) -> Any:
        return self.next()

    def next(self, timeout: float | None = None) -> Any:
        """The next result (a ``PoolTaskError`` holding the item's error if it raised, as
        Ray's), StopIteration at the end, ``multiprocessing.TimeoutError`` when none arrives
        within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            took = False
            with self._cond:
                if self._buffer:
                    value = self._buffer.popleft()
                    break
                chunk = self._take_chunk()
                if chunk is not None:
                    self._buffer.extend(chunk)
                    took = True
                elif self._source_done and self._taken == self._sent:
                    if self._source_error is not None:
                        error, self._source_error = self._source_error, None
                        raise error
                    raise StopIteration
                else:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError
                    self._cond.wait(left)
            if took:
                # Room in the window: the pool may send more. Outside our lock: the pool
                # takes its own lock and then ours, never the other way round.
                self._poke()
        if isinstance(value, ItemFailure):
            return PoolTaskError(value.raised())
        return value

    def _take_chunk(self) -> list[Any] | None:
        if self._ordered:
            chunk = self._done.pop(self._taken, None)
        else:
            chunk = self._arrived.popleft() if self._arrived else None
        if chunk is not None:
            self._taken += 1
        return chunk


def _call_back(fn: Callable[[Any], Any], value: Any) -> None:
    """Runs a user's callback; an error in it is logged, as it must not stop the pool's
    dispatcher (multiprocessing's result handler thread dies of it)."""
    try:
        fn(value)
    except Exception:
        logger.exception("a Pool callback raised")
