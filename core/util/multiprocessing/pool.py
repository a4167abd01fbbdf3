"""``ember.util.multiprocessing.Pool``: ``multiprocessing.Pool``'s API on actors, so a pool
spans a cluster (Ray's ``ray.util.multiprocessing.Pool``).

Each of the pool's processes is an actor (``PoolWorker``). Work is cut into chunks of calls;
a scheduler sends each chunk to the actor with the fewest chunks in flight, keeping at most
``_DEPTH`` in flight per actor and the rest here, so a slow item holds up only its own actor
(Ray deals every chunk out round-robin up front). Finished chunks are handled on one
dispatcher thread per pool, which records results, runs callbacks and sends more work.

Locks: the pool's lock, then a job's own; never the other way round (a job calls back into
the pool only after releasing its lock).
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import ember
from ember.exceptions import ActorError
from ember.util.multiprocessing.results import AsyncResult, IMapIterator, Item, Job
from ember.util.multiprocessing.results import PoolTaskError as PoolTaskError  # Ray's path
from ember.util.multiprocessing.worker import PoolWorker

logger = logging.getLogger(__name__)

_DEPTH = 2  # chunks in flight per actor: one running, one waiting, so none idles between
_IMAP_WINDOW = 2  # imap: chunks sent ahead of the consumer, per actor


@dataclass
class _Slot:
    """One of the pool's processes: its actor (replaced when it retires or dies)."""

    actor: Any
    calls: int = 0  # chunks sent to this actor
    inflight: int = 0  # chunks sent to this slot and not yet finished


@dataclass
class _State:
    """What the scheduler knows, under the pool's lock."""

    jobs: collections.deque[Job] = field(default_factory=collections.deque)
    inflight: int = 0
    closed: bool = False
    terminated: bool = False
    retired: bool = False  # every actor was told to exit (close) or killed (terminate)


class Pool:
    """A pool of actor processes (``multiprocessing.Pool``'s API).

    Args:
        processes: how many actors; default the cluster's CPU count.
        initializer: called as ``initializer(*initargs)`` in each actor when it starts.
        initargs: the initializer's arguments.
        maxtasksperchild: chunks an actor runs before it is replaced by a fresh one
            (None: for ever).
        context: accepted for ``multiprocessing`` compatibility and ignored.
        ray_address: the cluster to join when Ember is not initialised yet (else
            ``EMBER_ADDRESS``/``RAY_ADDRESS``, else a new local node with ``processes``
            CPUs); ``"local"`` starts a local node.
        ray_remote_args: options for the actors (``num_cpus``, ``resources``, ...); by
            default they reserve no CPU, as Ray's, so work they start can use the CPUs.
    """

    def __init__(
        self,
        processes: int | None = None,
        initializer: Callable[..., Any] | None = None,
        initargs: Iterable[Any] | None = None,
        maxtasksperchild: int | None = None,
        context: Any = None,
        ray_address: str | None = None,
        ray_remote_args: dict[str, Any] | None = None,
    ) -> None:
        if context is not None:
            logger.warning("Pool(context=...) is ignored: the pool's processes are actors")
        if maxtasksperchild is not None and maxtasksperchild < 1:
            raise ValueError("maxtasksperchild must be a positive integer or None")
        self._initializer = initializer
        self._initargs = tuple(initargs) if initargs is not None else None
        self._maxtasks = maxtasksperchild
        self._actor_class = ember.remote(PoolWorker).options(
            **{"num_cpus": 0, **(ray_remote_args or {})}
        )
        self._lock = threading.RLock()
        self._state = _State()
        self._finished = threading.Condition(self._lock)
        self._exits: list[ember.ObjectRef] = []  # the exit calls of retired actors
        self._events: queue.SimpleQueue[_Event | None] = queue.SimpleQueue()

        processes = _connect(processes, ray_address)
        self._slots = [_Slot(self._new_actor()) for _ in range(processes)]
        try:
            ember.get([slot.actor.ping.remote() for slot in self._slots])
        except BaseException:
            for slot in self._slots:
                ember.kill(slot.actor)
            raise
        # The thread holds the pool weakly, so a pool dropped without close() is collected
        # (its actors then exit with their last handles) and the thread ends with it.
        self._dispatcher = threading.Thread(
            target=_dispatch,
            args=(self._events, weakref.ref(self)),
            daemon=True,
            name="ember-pool-dispatcher",
        )
        self._dispatcher.start()
        weakref.finalize(self, self._events.put, None)

    def __repr__(self) -> str:
        s = self._state
        state = "TERMINATED" if s.terminated else "CLOSED" if s.closed else "RUNNING"
        return f"<Pool state={state} pool_size={len(self._slots)}>"

    # -- the multiprocessing API ---------------------------------------------------------
    def apply(
        self,
        func: Callable[..., Any],
        args: Iterable[Any] = (),
        kwds: dict[str, Any] | None = None,
        *,
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """``func(*args, **kwds)`` on one of the pool's actors; its result."""
        return self.apply_async(func, args, kwds, kwargs=kwargs).get()

    def apply_async(
        self,
        func: Callable[..., Any],
        args: Iterable[Any] = (),
        kwds: dict[str, Any] | None = None,
        callback: Callable[[Any], Any] | None = None,
        error_callback: Callable[[BaseException], Any] | None = None,
        *,
        kwargs: dict[str, Any] | None = None,
    ) -> AsyncResult:
        """``apply``, returning an AsyncResult at once. ``kwargs=`` is Ray's name for
        ``kwds``. ``callback`` gets the value, ``error_callback`` the error."""
        item: Item = (tuple(args or ()), dict(kwargs or kwds or {}))
        return self._submit(AsyncResult(func, [[item]], callback, error_callback, single=True))

    def map(
        self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int | None = None
    ) -> list[Any]:
        """``[func(x) for x in iterable]`` across the pool, in order."""
        return self.map_async(func, iterable, chunksize).get()

    def map_async(
        self,
        func: Callable[[Any], Any],
        iterable: Iterable[Any],
        chunksize: int | None = None,
        callback: Callable[[list[Any]], Any] | None = None,
        error_callback: Callable[[BaseException], Any] | None = None,
    ) -> AsyncResult:
        """``map``, returning an AsyncResult at once; ``callback`` gets the whole list."""
        return self._map(func, iterable, chunksize, False, callback, error_callback)

    def starmap(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Iterable[Any]],
        chunksize: int | None = None,
    ) -> list[Any]:
        """``[func(*args) for args in iterable]`` across the pool, in order."""
        return self.starmap_async(func, iterable, chunksize).get()

    def starmap_async(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Iterable[Any]],
        chunksize: int | None = None,
        callback: Callable[[list[Any]], Any] | None = None,
        error_callback: Callable[[BaseException], Any] | None = None,
    ) -> AsyncResult:
        """``starmap``, returning an AsyncResult at once (``multiprocessing``'s signature;
        Ray's has no ``chunksize``, so pass its callbacks by keyword)."""
        return self._map(func, iterable, chunksize, True, callback, error_callback)

    def imap(
        self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int | None = 1
    ) -> IMapIterator:
        """Results one by one, in order, reading ``iterable`` lazily (it may be endless)."""
        return self._imap(func, iterable, chunksize, ordered=True)

    def imap_unordered(
        self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int | None = 1
    ) -> IMapIterator:
        """``imap``, results in the order they finish."""
        return self._imap(func, iterable, chunksize, ordered=False)

    def close(self) -> None:
        """No more work may be submitted; what was submitted finishes, then the actors exit."""
        with self._lock:
            self._state.closed = True
            self._retire_if_drained()

    def terminate(self) -> None:
        """Stops at once: the actors are killed, outstanding results fail (ActorDiedError
        for work that was running, RuntimeError for work that had not started)."""
        with self._lock:
            s = self._state
            if s.terminated:
                return
            s.closed = s.terminated = s.retired = True
            jobs, s.jobs = list(s.jobs), collections.deque()
            actors = [slot.actor for slot in self._slots]
            if s.inflight == 0:
                self._events.put(None)
            self._finished.notify_all()
        for actor in actors:
            ember.kill(actor)
        error = RuntimeError("the Pool was terminated before this work started")
        for job in jobs:
            job.abandon(error)

    def join(self, timeout: float | None = None) -> None:
        """Waits for the actors of a closed or terminated pool to exit (``timeout``: at most
        that many seconds, an Ember extension)."""
        with self._lock:
            if not self._state.closed:
                raise ValueError("Pool is still running")
            if not self._finished.wait_for(lambda: self._state.retired, timeout):
                return
            exits = list(self._exits)
        if exits:
            ember.wait(exits, num_returns=len(exits), timeout=timeout)
        self._dispatcher.join(timeout)

    def __enter__(self) -> Pool:
        self._check_running()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.terminate()

    # -- submitting ------------------------------------------------------------------------
    def _check_running(self) -> None:
        if self._state.closed:
            raise ValueError("Pool not running")

    def _map(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Any],
        chunksize: int | None,
        star: bool,
        callback: Callable[[list[Any]], Any] | None,
        error_callback: Callable[[BaseException], Any] | None,
    ) -> AsyncResult:
        self._check_running()
        items = list(iterable)
        if chunksize is None:  # multiprocessing's and Ray's rule: about 4 chunks per process
            chunksize = -(-len(items) // (len(self._slots) * 4)) or 1
        elif chunksize < 1:
            raise ValueError(f"Chunksize must be 1+, not {chunksize}")
        chunks = [
            [((*x,) if star else (x,), {}) for x in items[i : i + chunksize]]
            for i in range(0, len(items), chunksize)
        ]
        return self._submit(AsyncResult(func, chunks, callback, error_callback))

    def _imap(
        self,
        func: Callable[[Any], Any],
        iterable: Iterable[Any],
        chunksize: int | None,
        ordered: bool,
    ) -> IMapIterator:
        self._check_running()
        chunksize = 1 if chunksize is None else chunksize
        if chunksize < 1:
            raise ValueError(f"Chunksize must be 1+, not {chunksize}")
        window = _IMAP_WINDOW * len(self._slots)
        job = IMapIterator(func, iter(iterable), chunksize, False, ordered, window, self._pump)
        return self._submit(job)

    def _submit(self, job: Job) -> Any:
        with self._lock:
            self._check_running()
            self._state.jobs.append(job)
        job.keepalive = self  # until it is done: the work must not die with the pool's name
        self._pump()
        return job

    def _pump(self) -> None:
        """Sends chunks while an actor has room and a job has a chunk to give."""
        unsent: list[tuple[Job, int, BaseException]] = []
        with self._lock:
            s = self._state
            while s.jobs and not s.terminated:
                slot = min(self._slots, key=_load)
                if slot.inflight >= _DEPTH:
                    break
                for job in list(s.jobs):
                    chunk = job.next_chunk()
                    if job.exhausted():
                        s.jobs.remove(job)
                    if chunk is not None:
                        break
                else:
                    break  # every job is waiting (an imap for its consumer)
                try:
                    self._send(slot, job, *chunk)
                except Exception as e:  # noqa: BLE001 - e.g. arguments that cannot be pickled
                    unsent.append((job, chunk[0], e))
            self._retire_if_drained()
        # Outside the lock, as on the dispatcher: a failed chunk may run a user's callback.
        for job, index, error in unsent:
            job.chunk_done(index, None, error)

    def _send(self, slot: _Slot, job: Job, index: int, items: list[Item]) -> None:
        actor = slot.actor
        ref = actor.run_batch.remote(job.func, items)
        slot.inflight += 1
        slot.calls += 1
        self._state.inflight += 1
        if self._maxtasks is not None and slot.calls >= self._maxtasks:
            # Its last chunk is queued: it exits after it, and a fresh actor takes the slot.
            self._exits.append(actor.exit.remote())
            slot.actor, slot.calls = self._new_actor(), 0
        events = self._events
        ref.future().add_done_callback(lambda fut: events.put((job, index, slot, actor, fut)))

    def _retire_if_drained(self) -> None:
        """A closed pool with nothing left to send tells each actor to exit after its work."""
        s = self._state
        if s.closed and not s.jobs and not s.retired:
            s.retired = True
            self._exits.extend(slot.actor.exit.remote() for slot in self._slots)
            if s.inflight == 0:
                self._events.put(None)
            self._finished.notify_all()

    def _new_actor(self) -> Any:
        return self._actor_class.remote(self._initializer, self._initargs)

    # -- on the dispatcher thread ---------------------------------------------------------
    def _chunk_finished(self, event: _Event) -> bool:
        """Records a finished chunk and sends more; False once the pool has nothing left."""
        job, index, slot, actor, fut = event
        try:
            outcomes, error = fut.result(), None
        except BaseException as e:  # noqa: BLE001 - the chunk's failure, for its items
            outcomes, error = None, e
        with self._lock:
            slot.inflight -= 1
            self._state.inflight -= 1
            if isinstance(error, ActorError) and slot.actor is actor and not self._state.retired:
                # Its actor died (a crash in the work, or its node): a fresh one keeps the
                # pool's size. Chunks already queued on the dead one fail like this one.
                slot.actor, slot.calls = self._new_actor(), 0
        job.chunk_done(index, outcomes, error)
        self._pump()
        with self._lock:
            return not (self._state.retired and self._state.inflight == 0)


_Event = tuple[Job, int, _Slot, Any, Any]  # job, chunk index, slot, actor, future


def _dispatch(events: queue.SimpleQueue[_Event | None], pool_ref: weakref.ref[Pool]) -> None:
    while (event := events.get()) is not None:
        pool = pool_ref()
        if pool is None or not pool._chunk_finished(event):
            return
        del pool


def _load(slot: _Slot) -> int:
    return slot.inflight


def _connect(processes: int | None, address: str | None) -> int:
    """Initialises Ember as Ray's Pool does (an address, else the environment's, else a new
    local node sized for the pool) and checks ``processes`` against the cluster's CPUs."""
    if processes is not None and processes <= 0:
        raise ValueError("Processes in the pool must be >0.")
    if not ember.is_initialized():
        if address is not None and address != "local":
            ember.init(address=address)
        elif address is None and (os.environ.get("EMBER_ADDRESS") or os.environ.get("RAY_ADDRESS")):
            ember.init()
        else:
            ember.init(num_cpus=processes)
    cpus = int(ember.cluster_resources().get("CPU", 0))
    if processes is None:
        processes = cpus
    if processes <= 0:
        raise ValueError("Processes in the pool must be >0.")
    if cpus < processes:
        raise ValueError(
            f"Tried to start a pool with {processes} processes on an existing cluster, but "
            f"there are only {cpus} CPUs in the cluster."
        )
    return processes
