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

import logging
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


def raise_open_files_limit(log: logging.Logger, process: str) -> int:
    """Raises this process's soft limit on open files to its hard limit (as Ray does at
    start-up) and returns the soft limit in force. Every worker, actor and caller is a
    socket: the usual soft limit of 1,024 stops a node at a few hundred actors, while the
    hard limit is often far higher. Children inherit the raised limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        target = _kernel_open_files_cap()
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            log.warning(
                "%s: could not raise the open-files limit from %d to %d: %s",
                process,
                soft,
                target,
                e,
            )
            return soft
        log.info(
            "%s: open-files limit raised from %d to %d (its hard limit)", process, soft, target
        )
        return target
    return soft


def _kernel_open_files_cap() -> int:
    """The most open files one process may have when its hard limit is unlimited."""
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 20
