"""Workers that died before registering: reported with their cause, a bounded number of
times, and with a bounded number of log files left behind.

A burst of failed starts (a full listen backlog once refused thousands of workers their
connection to the raylet) wrote the same line 28,000 times and left 58,659 log files. Here
the first failure of a burst is logged at once with its cause (the last line the worker
wrote to its stderr, usually the exception that ended it), and the rest are counted by
how they ended and summed up at most once per ``LOG_EVERY_S``. The log files of the first
``LOGS_KEPT`` failed workers stay for reading; later ones are removed once their cause is
read (each failure's cause is in the raylet's log).
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("ember.raylet")

LOG_EVERY_S = 10.0
LOGS_KEPT = 20
TAIL_BYTES = 4096


class StartFailures:
    def __init__(self, logs_dir: str, clock: Callable[[], float]) -> None:
        self.logs_dir = logs_dir
        self.clock = clock
        self.total = 0
        self.logs_kept = 0
        self._last_logged = -LOG_EVERY_S
        self._since: collections.Counter[str] = collections.Counter()  # not yet logged

    def record(self, w: Any) -> None:
        """``w`` (a ``WorkerProc``) exited before it registered."""
        self.total += 1
        base = self._log_base(w)
        cause = _last_line(base + ".err") if base else ""
        how = w.exit_reason + (f": {cause}" if cause else "")
        if base:
            self._bound_logs(base)
        now = self.clock()
        if now - self._last_logged < LOG_EVERY_S:
            self._since[how] += 1
            return
        self.flush(now)
        self._last_logged = now
        logger.error("worker %s died while starting: %s", w.pid, how)

    def flush(self, now: float | None = None) -> None:
        """Logs the failures counted since the last line (the periodic pass calls it too, so
        a burst's tail is not left unsaid)."""
        if not self._since:
            return
        if now is None:
            now = self.clock()
            if now - self._last_logged < LOG_EVERY_S:
                return
            self._last_logged = now
        kinds = "; ".join(f"{n} x {how}" for how, n in self._since.most_common(5))
        others = len(self._since) - 5
        logger.error(
            "%d more workers died while starting in the last %g s: %s%s",
            sum(self._since.values()),
            LOG_EVERY_S,
            kinds,
            f"; and {others} other causes" if others > 0 else "",
        )
        self._since.clear()

    def _log_base(self, w: Any) -> str:
        if w.pid <= 0:
            return ""
        return os.path.join(self.logs_dir, f"worker-{w.worker_id.hex()[:16]}-{w.pid}")

    def _bound_logs(self, base: str) -> None:
        if self.logs_kept < LOGS_KEPT:
            self.logs_kept += 1
            return
        for suffix in (".out", ".err", ".log"):
            try:
                os.unlink(base + suffix)
            except OSError:
                pass


def _last_line(path: str) -> str:
    """The last non-empty line of a file (its last TAIL_BYTES), or ""."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - TAIL_BYTES, 0))
            tail = f.read()
    except OSError:
        return ""
    for line in reversed(tail.decode("utf-8", "replace").splitlines()):
        if line.strip():
            return line.strip()[:300]
    return ""
