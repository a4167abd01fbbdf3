"""The decorator both submitters use to run an entry point under their ``_lock``.

Each submitter runs on the core worker's I/O thread, except its ``submit_direct``, which the
user's thread calls to send work to a connected worker itself (saving a wake-up of the I/O
thread per call). What both threads touch is guarded by the submitter's reentrant ``_lock``
(a reply handled under it may retry or queue work, which takes it again).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def locked(method: F) -> F:
    """Runs ``method`` holding ``self._lock``."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]
