"""The actor behind each of a ``Pool``'s processes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from ember.actor import exit_actor
from ember.util.multiprocessing.results import Item, ItemFailure


class PoolWorker:
    """Runs the initializer once, then chunks of calls. One call at a time (a plain actor),
    so ``exit`` runs only after every chunk sent before it: that is how ``close`` and
    ``maxtasksperchild`` let a worker finish its work and go."""

    def __init__(
        self, initializer: Callable[..., Any] | None, initargs: Iterable[Any] | None
    ) -> None:
        if initializer is not None:
            initializer(*(initargs or ()))

    def ping(self) -> int:
        """Answers once the initializer has run (the pool waits for every worker's)."""
        return os.getpid()

    def run_batch(self, func: Callable[..., Any], items: list[Item]) -> list[Any]:
        outcomes: list[Any] = []
        for args, kwargs in items:
            try:
                outcomes.append(func(*args, **kwargs))
            except Exception as e:  # noqa: BLE001 - each item's error goes to its caller
                outcomes.append(ItemFailure.capture(e))
        return outcomes

    def exit(self) -> None:
        exit_actor()
