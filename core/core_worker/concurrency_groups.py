"""An actor's concurrency groups (Ray's ``concurrency_groups={"io": 2, "compute": 4}``): each
group runs its calls apart from the others, so a call blocked in one group does not hold up
another.

A threaded actor gets a thread pool per group, of the group's size; its default group is the
executor's own (one thread, the worker's main loop, or ``max_concurrency`` threads). An async
actor runs every call on its one event loop, each group under its own limit (a semaphore of
the group's size; the default group's is ``max_concurrency``). A method's group is its
``@method(concurrency_group=...)``, or the call's ``.options(concurrency_group=...)``.
"""

from __future__ import annotations

import asyncio

from ember.core_worker.call_threads import CallThreads


class UnknownGroup(ValueError):
    pass


class ConcurrencyGroups:
    def __init__(self, groups: dict[str, int], is_async: bool) -> None:
        self.sizes = dict(groups)
        self.is_async = is_async
        self.pools: dict[str, CallThreads] = {}
        self.limits: dict[str, asyncio.Semaphore] = {}
        if not is_async:
            self.pools = {
                name: CallThreads(size, f"ember-actor-{name}") for name, size in groups.items()
            }

    def make_limits(self) -> None:
        """The async groups' semaphores: made on the actor's loop thread, which owns them."""
        self.limits = {name: asyncio.Semaphore(size) for name, size in self.sizes.items()}

    def check(self, group: str) -> None:
        if group and group not in self.sizes:
            known = ", ".join(sorted(self.sizes)) or "none"
            raise UnknownGroup(
                f"concurrency group {group!r} is not one of this actor's (declared: {known}); "
                "declare it with @ember.remote(concurrency_groups={...})"
            )

    def pool(self, group: str) -> CallThreads | None:
        """The group's pool (a threaded actor), or None: the default group's way."""
        return self.pools.get(group) if group else None

    def limit(self, group: str, default: asyncio.Semaphore) -> asyncio.Semaphore:
        return self.limits.get(group, default) if group else default
