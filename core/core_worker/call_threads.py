"""The threads a threaded actor runs its calls on (``max_concurrency > 1``, and each
concurrency group of a sync actor).

Not ``concurrent.futures.ThreadPoolExecutor``: a call's reply goes back by itself, so the
Future, work item and idle semaphore it makes per call are waste, ~15 µs each against a few
µs for a put on a ``SimpleQueue``; on a 1:1 stream of small calls that was a tenth of the
call. Threads start as calls need them, up to ``size``: a new one whenever more calls are in
hand than threads exist, so a call never waits behind a busy thread while the group has room
(calls that block on each other must not deadlock below the concurrency the actor asked for).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class CallThreads:
    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError(f"a call thread group needs at least one thread, not {size}")
        self.size = size
        self.name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._submitted = 0  # only the submitting (I/O) thread writes it
        self._finished = itertools.count(1)  # next() is atomic: the threads share it
        # The last count a thread took. Read while other threads move on, it may be behind,
        # which only overstates the calls in hand (an extra thread, never a missing one).
        self._finished_seen = 0

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Runs ``fn(*args)`` on one of the threads. Called from one thread only."""
        self._submitted += 1
        self._queue.put((fn, args))
        in_hand = self._submitted - self._finished_seen
        if in_hand > len(self._threads) and len(self._threads) < self.size:
            thread = threading.Thread(
                target=self._serve, name=f"{self.name}_{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def waiting(self) -> bool:
        """Whether calls wait for a thread (a hint: another thread may take one meanwhile)."""
        return not self._queue.empty()

    def _serve(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except BaseException:  # the call's own errors are its reply's; this is ours
                logger.exception("a call on %s raised past its handler", self.name)
            finally:
                self._finished_seen = next(self._finished)

    def stop(self) -> None:
        """Ends each thread once the calls queued before this are done."""
        for _ in self._threads:
            self._queue.put(None)
