"""An actor's concurrency groups (Ray's ``concurrency_groups={"io": 2, "compute": 4}``): each
group runs its calls apart from the others, so a call blocked in one group does not hold up
another.

A threaded actor gets a thread pool per group, of the group's size; its default group is the
executor's own (one thread, the worker's main loop, or ``max_concurrency`` threads). An async
actor gets an event loop per group, each on its own thread (a ``Lane``) and bounded by a
semaphore of the group's size; the default group's lane is bounded by ``max_concurrency``.
A call that blocks its lane's thread (a sync method, or ``time.sleep`` in a coroutine)
stalls only its own group, as in Ray. A method's group is its
``@method(concurrency_group=...)``, or the call's ``.options(concurrency_group=...)``.
"""

from __future__ import annotations

import asyncio
import threading

from ember.core_worker.call_threads import CallThreads
from ember.protocol.connection import new_event_loop


class UnknownGroup(ValueError):
    pass


class Lane:
    """One event loop running on its own thread, and the semaphore bounding its calls (made
    on that thread, which owns it). ``loop`` may be made beforehand: the default group's is
    the main thread's loop too, so the constructor sees the loop the default group runs on
    (as Ray's ``asyncio.get_event_loop()`` in ``__init__`` does)."""

    def __init__(self, name: str, size: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop or new_event_loop()
        self.limit: asyncio.Semaphore | None = None
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.limit = asyncio.Semaphore(size)
            started.set()
            self.loop.run_forever()

        threading.Thread(target=run, name=name, daemon=True).start()
        if not started.wait(10):
            raise RuntimeError(f"the event loop thread {name} did not start within 10 s")


class ConcurrencyGroups:
    def __init__(self, groups: dict[str, int], is_async: bool) -> None:
        self.sizes = dict(groups)
        self.is_async = is_async
        self.pools: dict[str, CallThreads] = {}
        self.lanes: dict[str, Lane] = {}
        if is_async:
            self.lanes = {
                name: Lane(f"ember-async-actor-{name}", size) for name, size in groups.items()
            }
        else:
            self.pools = {
                name: CallThreads(size, f"ember-actor-{name}") for name, size in groups.items()
            }

    def check(self, group: str) -> None:
        if group and group not in self.sizes:
            known = ", ".join(sorted(self.sizes)) or "none"
            raise UnknownGroup(
                f"concurrency group {group!r} is not one of this actor's (declared: {known}); "
                "declare it with @ember.remote(concurrency_groups={...})"
            )
