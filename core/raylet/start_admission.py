"""Whether the raylet may start one more worker process, and what to say when it may not.

Each worker is a process with its own memory (~5 MB for an idle actor, page tables
included) and, on the head, two open files in the GCS (its connection to the GCS and the GCS's to it) and
one in the raylet. A burst of actor creations (thousands with ``num_cpus=0``) would
otherwise start processes until the kernel's OOM killer or ``EMFILE`` ended something at
random; here the limit is named before it is hit:

- memory: no worker starts while the node's memory use (the memory monitor's reading) is
  within ``START_MARGIN`` of ``config.memory_usage_threshold`` (and, once held, until twice
  that is free). The request waits (the reaper's pass tries again) and the raylet's log
  and every driver are told once per episode, with the figures. The margin keeps starts from pushing the node to the point
  where the memory monitor starts killing workers.
- open files: the raylet and GCS raise their soft limit to the hard limit at start-up
  (``process_limits.raise_open_files_limit``); when the workers would need more than that
  limit allows, the log says so once, naming the limit and how to raise it. Starts go on:
  the GCS fails the actor that does not fit with ``Too many open files``.
"""

from __future__ import annotations

import logging
import resource
import time
from typing import Any

from ember import config

logger = logging.getLogger("ember.raylet")

# Below the memory monitor's kill threshold: room for the starts already under way (at most
# max_starting_workers, a few MB each) and the lag of a reading; small enough that a node
# whose threshold sits just above its use (a test's) still starts its first workers.
START_MARGIN = 128 * 1024**2
READ_EVERY_S = 0.1  # the memory reading is reused for this long (a burst asks per start)
FILES_PER_WORKER = 2  # open files a worker costs its busiest peer (the GCS)
FILES_RESERVED = 256  # the process's own files: logs, listeners, the store, other clients


class StartAdmission:
    def __init__(self, reader: Any, threshold: float = config.memory_usage_threshold) -> None:
        self.reader = reader  # memory_monitor.UsageReader
        self.threshold = threshold
        self._reading: Any = None
        self._read_at = -READ_EVERY_S
        self.held = False  # starts are held back for memory now (told once per episode)
        self.held_total = 0  # starts held back since the node started
        self._files_told = False

    def reading(self) -> Any:
        now = time.monotonic()
        if now - self._read_at >= READ_EVERY_S:
            self._reading, self._read_at = self.reader.read(), now
        return self._reading

    def memory_allows(self, workers: int) -> str | None:
        """None if a worker may start; else why not (once per episode, else "")."""
        reading = self.reading()
        limit = self.threshold * reading.total - START_MARGIN
        if self.held:
            # Resume only with twice the margin free: the memory monitor's kills free a few
            # MB each, and starting again at once made a cycle of starts and kills.
            limit -= START_MARGIN
        if reading.used < limit:
            self.held = False
            return None
        self.held_total += 1
        if self.held:
            return ""
        self.held = True
        return (
            f"Not starting more worker processes: the node's memory is "
            f"{reading.fraction:.1%} used ({_gib(reading.used)} of {_gib(reading.total)}, "
            f"{reading.source}), within {START_MARGIN >> 20} MiB of the memory monitor's "
            f"threshold (EMBER_MEMORY_USAGE_THRESHOLD {self.threshold:g}), where it kills "
            f"workers. {workers} workers run on this node; each idle actor takes "
            f"about 5 MB. Tasks and actors waiting for a worker stay "
            f"pending until memory frees up: end actors you no longer need (ember.kill), "
            f"or give the node more memory."
        )

    def check_open_files(self, workers: int) -> None:
        """Logs once when ``workers`` workers would need more open files than the limit."""
        if self._files_told:
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return
        capacity = (soft - FILES_RESERVED) // FILES_PER_WORKER
        if workers < capacity * 0.9:
            return
        self._files_told = True
        logger.error(
            "%d workers run on this node; the open-files limit of %d (hard limit %d) allows "
            "about %d: the GCS holds %d files per actor, so creating more actors will fail "
            "with 'Too many open files'. Raise the hard limit (ulimit -Hn as root, or nofile "
            "in /etc/security/limits.conf) before starting the node.",
            workers,
            soft,
            hard,
            capacity,
            FILES_PER_WORKER,
        )


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB"
