"""A task's resource limits do not outlive it on a reused worker.

A task may lower its process's limits (``resource.setrlimit(RLIMIT_AS, ...)`` to cap its own
memory, say); the worker then runs the next task, maybe another job's, under that cap. The
worker watches the two Python entry points that set limits (``resource.setrlimit`` and
``resource.prlimit`` on its own process), so the check costs nothing on a task that changed
none, and after such a task puts every limit back as it was when the worker started. A hard
limit that was lowered cannot be raised again by an unprivileged process: the worker then
retires after replying, and a fresh one takes its place (as ``max_calls`` does).
"""

from __future__ import annotations

import os
import resource
from typing import Any

_LIMITS = tuple(getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_"))


class LimitWatch:
    def __init__(self) -> None:
        self.original = {r: resource.getrlimit(r) for r in _LIMITS}
        self.changed = False
        set_limit, pr_limit = resource.setrlimit, resource.prlimit

        def setrlimit(which: int, limits: tuple[int, int]) -> None:
            self.changed = True
            set_limit(which, limits)

        def prlimit(pid: int, which: int, *limits: Any) -> tuple[int, int]:
            if limits and pid in (0, os.getpid()):
                self.changed = True
            return pr_limit(pid, which, *limits)

        resource.setrlimit = setrlimit
        resource.prlimit = prlimit
        self._set = set_limit

    def restore(self) -> bool:
        """Puts the limits back after a task changed some; False when one cannot be (its
        hard limit was lowered): the worker must not run another task."""
        self.changed = False
        whole = True
        for which, (soft, hard) in self.original.items():
            now = resource.getrlimit(which)
            if now == (soft, hard):
                continue
            try:
                self._set(which, (soft, hard))
            except (ValueError, OSError):
                whole = False
        return whole
