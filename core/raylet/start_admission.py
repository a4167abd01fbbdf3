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
- processes: no worker starts when the machine's processes and threads (each worker is
  two) would come within ``TASKS_RESERVED`` of its limit (kernel.pid_max,
  kernel.threads-max, ulimit -u), told as for memory; a fork past it fails with EAGAIN.
- open files: the raylet and GCS raise their soft limit to the hard limit at start-up
  (``process_limits.raise_open_files_limit``); when the workers would need more than that
  limit allows, the log says so once, naming the limit and how to raise it. Starts go on:
  the GCS fails the actor that does not fit with ``Too many open files``.
"""

from __future__ import annotations

import logging
import os
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
TASKS_PER_WORKER = 2  # a worker's process and its I/O thread
TASKS_RESERVED = 512  # pids left for everything else on the machine


class StartAdmission:
    def __init__(self, reader: Any, threshold: float = config.memory_usage_threshold) -> None:
        self.reader = reader  # memory_monitor.UsageReader
        self.threshold = threshold
        self._reading: Any = None
        self._read_at = -READ_EVERY_S
        self.held = False  # starts are held back for memory now (told once per episode)
        self.held_total = 0  # starts held back since the node started
        self._files_told = False
        self.tasks_held = False  # starts are held back for the process limit now
        self._task_limit: tuple[int, str] | None = None

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

    def tasks_allow(self, starting: int) -> str | None:
        """None if ``starting`` more workers fit under the machine's limit on processes and
        threads; else why not (once per episode, else ""). Each worker is two (its process
        and its I/O thread); a fork past the limit fails with EAGAIN."""
        if self._task_limit is None:  # read once: the kernel's limits seldom change
            self._task_limit = task_limit()
        limit, names = self._task_limit
        running = running_tasks()
        if running + TASKS_PER_WORKER * starting + TASKS_RESERVED < limit:
            self.tasks_held = False
            return None
        if self.tasks_held:
            return ""
        self.tasks_held = True
        return (
            f"Not starting more worker processes: the machine runs {running} processes and "
            f"threads, and its limit is {limit} ({names}); each worker takes "
            f"{TASKS_PER_WORKER}. Tasks and actors waiting for a worker stay pending until "
            f"some end; raise the limit (sysctl kernel.pid_max / kernel.threads-max, or "
            f"ulimit -u) to run more."
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


def task_limit() -> tuple[int, str]:
    """The most processes and threads this user may have on this machine, and which limits
    that is (kernel.pid_max, kernel.threads-max, and ulimit -u unless we are root)."""
    limits = []
    for name, path in (
        ("kernel.pid_max", "/proc/sys/kernel/pid_max"),
        ("kernel.threads-max", "/proc/sys/kernel/threads-max"),
    ):
        try:
            with open(path) as f:
                limits.append((int(f.read()), name))
        except (OSError, ValueError):
            pass
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if soft != resource.RLIM_INFINITY and os.geteuid() != 0:  # root is not held to it
        limits.append((soft, "ulimit -u"))
    if not limits:
        return 1 << 30, "none found"
    lowest = min(n for n, _ in limits)
    return lowest, ", ".join(f"{name} {n}" for n, name in limits)


def running_tasks() -> int:
    """Processes and threads on the machine now (the kernel's count, from /proc/loadavg)."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        return 0


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB"
