"""The raylet's memory monitor, after Ray's: before the kernel's OOM killer picks a victim
(possibly the raylet, the GCS or the driver), the raylet kills one worker of its own choice
and says why.

Every ``config.memory_monitor_refresh_ms`` (250; 0 disables) it reads the node's memory use:
under a cgroup memory limit (v1 or v2, the smallest limit from the process's cgroup up), that
cgroup's usage less its inactive page cache against the limit, as the kernel judges it there;
else ``MemTotal - MemAvailable`` from /proc/meminfo. Above ``config.memory_usage_threshold``
(0.95) it kills one worker, then none until that one's exit is seen (the kill needs time to
free its memory; a second victim chosen meanwhile would be killed for nothing).

The victim (``choose_victim``, Ray's group-by-owner policy): only workers running leases
(tasks or actors); never the raylet, GCS, agent, dashboard, zygote or a driver, which are not
leased workers. Retriable work first (a task whose ``max_retries`` is not 0, an actor with
restarts left); among it, the caller with the most tasks running here (ties: the caller whose
first task started last); within that caller, the most recently granted. Each actor is a
caller of its own. A task is killed with leave to retry only if its caller still has another
task running here, so each caller keeps making progress and a lone task that cannot fit
fails with ``OutOfMemoryError`` instead of being killed again and again.

Before the kill, the lease's holder (the task's owner) is told (``worker_oom_killed``) and
answers which task that was and whether it will run again; its reply names the task in the
raylet's log line and the node's event (``WORKER_OOM_KILLED``, through ``node_stats`` to the
agent). The owner fails the task with ``OutOfMemoryError`` or retries it on its OOM budget.

``config.memory_monitor_usage_file`` is a test hook: a file holding the usage fraction, read
instead of the real usage (the real totals still size the message), so tests can cross the
threshold without filling the machine.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from ember import config
from ember.raylet import lease_events as ev
from ember.raylet.lease_records import WorkerState

if TYPE_CHECKING:
    from ember.raylet.raylet import Raylet

logger = logging.getLogger("ember.raylet")

_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a huge page-aligned number
_KILL_WAIT_SECONDS = 10.0  # a victim not seen to exit by then no longer holds up the next kill
_NOTICE_TIMEOUT = 1.0  # the owner's answer is worth waiting for, not under pressure for long
_TOP_USERS = 5


class MemoryReading(NamedTuple):
    used: int
    total: int
    source: str  # where it was read: "cgroup v2 <dir>", "cgroup v1 <dir>", "/proc/meminfo"

    @property
    def fraction(self) -> float:
        return self.used / self.total if self.total else 0.0


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            raw = f.read().strip()
    except OSError:
        return None
    return int(raw) if raw.isdigit() else None  # "max" (cgroup v2's no limit) is None


class _KeptFile:
    """A kernel file read again and again through one descriptor: a read at offset 0
    regenerates its text, and saves the open and close of each reading (half its cost)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def read(self) -> bytes:
        return os.pread(self.fd, 65536, 0)

    def __del__(self) -> None:
        os.close(self.fd)

    def value(self, key: bytes) -> int:
        """The number after ``key`` (``b"MemAvailable:"``, ``b"inactive_file "``), or 0."""
        data = self.read()
        i = data.find(b"\n" + key)
        if i < 0 and not data.startswith(key):
            return 0
        start = i + 1 + len(key) if i >= 0 else len(key)
        return int(data[start:].split(None, 1)[0])


def meminfo() -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes."""
    f = _KeptFile("/proc/meminfo")
    return f.value(b"MemTotal:") * 1024, f.value(b"MemAvailable:") * 1024


def find_cgroup_limit(
    proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup"
) -> tuple[int, str, int] | None:
    """(version, directory, limit) of the smallest memory limit over this process's cgroup
    and its ancestors, or None when no cgroup limits memory."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    best: tuple[int, str, int] | None = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and os.path.exists(os.path.join(root, "cgroup.controllers")):
            version, base, limit_file = 2, root, "memory.max"
        elif "memory" in controllers.split(","):
            version, base, limit_file = 1, os.path.join(root, "memory"), "memory.limit_in_bytes"
        else:
            continue
        base = os.path.normpath(base)
        # In a cgroup namespace the path may not exist under the mount: start at its root.
        d = os.path.normpath(os.path.join(base, path.lstrip("/")))
        if not os.path.isdir(d):
            d = base
        while True:
            limit = _read_int(os.path.join(d, limit_file))
            if limit is not None and limit < _UNLIMITED and (best is None or limit < best[2]):
                best = (version, d, limit)
            if len(d) <= len(base):
                break
            d = os.path.dirname(d)
    return best


class UsageReader:
    """The node's memory use, read the cheapest way that is right for where it runs."""

    def __init__(self, test_file: str = "") -> None:
        self.test_file = test_file
        self.mem_total = meminfo()[0]
        found = find_cgroup_limit()
        # A limit above the machine's memory limits nothing the machine could give.
        self.cgroup = found if found is not None and found[2] < self.mem_total else None
        self._files: tuple[_KeptFile, ...] = ()
        if self.cgroup is not None:
            version, d, _ = self.cgroup
            usage = "memory.current" if version == 2 else "memory.usage_in_bytes"
            self._files = (_KeptFile(os.path.join(d, usage)), _KeptFile(f"{d}/memory.stat"))
        else:
            self._files = (_KeptFile("/proc/meminfo"),)

    def describe(self) -> str:
        if self.cgroup is not None:
            version, d, limit = self.cgroup
            return f"cgroup v{version} {d} (limit {_gib(limit)})"
        return f"/proc/meminfo (MemTotal {_gib(self.mem_total)})"

    def read(self) -> MemoryReading:
        if self.cgroup is not None:
            version, d, limit = self.cgroup
            usage = int(self._files[0].read())
            key = b"inactive_file " if version == 2 else b"total_inactive_file "
            cache = self._files[1].value(key)
            real = MemoryReading(max(usage - cache, 0), limit, f"cgroup v{version} {d}")
        else:
            available = self._files[0].value(b"MemAvailable:") * 1024
            real = MemoryReading(self.mem_total - available, self.mem_total, "/proc/meminfo")
        if not self.test_file:
            return real
        try:
            with open(self.test_file) as f:
                fraction = float(f.read().strip())
        except (OSError, ValueError):
            return real  # the hook's file is being rewritten: the real value this once
        return MemoryReading(int(fraction * real.total), real.total, f"test file {self.test_file}")


# -- the policy ------------------------------------------------------------------------------
class Candidate(NamedTuple):
    worker: Any
    owner: Any  # who holds the lease (the tasks' caller); an actor is its own caller
    is_actor: bool
    retriable: bool
    granted_at: float


def choose_victim(candidates: list[Candidate]) -> tuple[Candidate, bool] | None:
    """Ray's group-by-owner choice: (the worker to kill, whether its task may run again),
    or None when no worker may be killed."""
    groups: dict[Any, list[Candidate]] = collections.defaultdict(list)
    for c in candidates:
        groups[("actor", c.worker) if c.is_actor else ("owner", c.owner)].append(c)
    retriable_left = any(c.retriable for c in candidates)
    best: tuple[tuple[int, float], list[Candidate]] | None = None
    for group in groups.values():
        pool = [c for c in group if c.retriable] if retriable_left else group
        if not pool:
            continue
        # The caller with the most running here; then the one whose first task started last.
        rank = (len(group), min(c.granted_at for c in group))
        if best is None or rank > best[0]:
            best = (rank, group)
    if best is None:
        return None
    group = best[1]
    pool = [c for c in group if c.retriable] if retriable_left else group
    victim = max(pool, key=lambda c: c.granted_at)
    return victim, victim.retriable and not victim.is_actor and len(group) > 1


# -- what the node's biggest processes are --------------------------------------------------
def top_memory_users(labels: dict[int, str], n: int = _TOP_USERS) -> list[tuple[int, int, str]]:
    """The ``n`` processes of the machine with the most private resident memory, as (pid,
    bytes, what). Resident less shared memory: the object store's pages, mapped by every
    worker, would otherwise count once per process."""
    page = os.sysconf("SC_PAGE_SIZE")
    sizes: list[tuple[int, int]] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/statm") as f:
                fields = f.read().split()
        except OSError:
            continue  # gone meanwhile
        sizes.append(((int(fields[1]) - int(fields[2])) * page, int(name)))
    sizes.sort(reverse=True)
    out = []
    for size, pid in sizes[:n]:
        what = labels.get(pid)
        if what is None:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    what = f.read(120).replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                what = "?"
        out.append((pid, size, what or "?"))
    return out


def _gib(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB"


def how_to_avoid(threshold: float) -> str:
    return (
        "To avoid it: run fewer tasks at once (ask for more CPUs per task, or give tasks and "
        "actors a memory= resource so that fewer fit on a node at a time), make each hold "
        "less, give the node more memory, or raise the threshold with "
        f"EMBER_MEMORY_USAGE_THRESHOLD (now {threshold:g}) when the node starts; "
        "EMBER_MEMORY_MONITOR_REFRESH_MS=0 turns the memory monitor off."
    )


# -- the monitor ----------------------------------------------------------------------------
class MemoryMonitor:
    def __init__(
        self,
        raylet: Raylet,
        *,
        refresh_ms: int = config.memory_monitor_refresh_ms,
        threshold: float = config.memory_usage_threshold,
        reader: UsageReader | None = None,
    ) -> None:
        self.raylet = raylet
        self.period = refresh_ms / 1000.0
        self.threshold = threshold
        self.reader = reader or UsageReader(config.memory_monitor_usage_file)
        self.last: MemoryReading | None = None
        self.kills_total = 0
        self.kill_seq = 0
        self.kills: collections.deque[dict[str, Any]] = collections.deque(maxlen=100)
        self._victim: Any = None
        self._victim_at = 0.0
        self._nothing_to_kill_logged = False

    @property
    def enabled(self) -> bool:
        return self.period > 0

    async def run(self) -> None:
        logger.info(
            "memory monitor: every %d ms, kills a worker above %.3f of %s",
            int(self.period * 1000),
            self.threshold,
            self.reader.describe(),
        )
        while True:
            await asyncio.sleep(self.period)
            try:
                await self.check()
            except Exception:
                # A bug must not stop the node from ever protecting itself again.
                logger.exception("the memory monitor's pass failed")

    async def check(self) -> None:
        """One refresh: read the usage; above the threshold, kill one worker."""
        reading = self.last = self.reader.read()
        if reading.fraction <= self.threshold:
            self._nothing_to_kill_logged = False
            return
        victim = self._victim
        if victim is not None and not victim.dead:
            if time.monotonic() - self._victim_at < _KILL_WAIT_SECONDS:
                return  # its memory is on its way back: judge again once it has exited
        self._victim = None
        picked = choose_victim(self._candidates())
        if picked is None:
            if not self._nothing_to_kill_logged:
                self._nothing_to_kill_logged = True
                logger.warning(
                    "memory use %.3f is above the threshold %.3f, but no task or actor "
                    "worker runs here to kill",
                    reading.fraction,
                    self.threshold,
                )
            return
        await self._kill(reading, *picked)

    def _candidates(self) -> list[Candidate]:
        out = []
        for lease in self.raylet.leases.machine.leases.values():
            w: Any = lease.worker
            if w.track.state not in (WorkerState.LEASED, WorkerState.ACTOR) or w.pid <= 0:
                continue  # already on its way out, or its pid is not known yet
            out.append(
                Candidate(w, lease.client, lease.is_actor, lease.retriable, lease.granted_at)
            )
        return out

    async def _kill(self, reading: MemoryReading, victim: Candidate, retry: bool) -> None:
        raylet = self.raylet
        w = victim.worker
        labels = {os.getpid(): "(the raylet)"}
        for p in raylet.pool.workers.values():
            if p.pid > 0:
                labels[p.pid] = f"(worker: {p.title or p.track.state.value.lower()})"
        users = await asyncio.to_thread(top_memory_users, labels)
        node_hex = raylet.node_id.hex()
        what_kind = "actor" if victim.is_actor else "task"
        detail = (
            f"Memory on node {node_hex} (IP {raylet.args.node_ip}) was {_gib(reading.used)} / "
            f"{_gib(reading.total)} ({reading.fraction:.3f}, {reading.source}), above the "
            f"memory usage threshold {self.threshold:g}. The memory monitor killed worker "
            f"{w.worker_id.hex()} (pid {w.pid}) because it ran the most recently scheduled "
            f"{'retriable ' if victim.retriable else ''}{what_kind} of the caller with the "
            "most work on the node.\nBiggest memory users on the node (resident, not shared):\n"
            + "".join(f"  pid {pid:>7}  {_gib(size):>10}  {cmd}\n" for pid, size, cmd in users)
            + how_to_avoid(self.threshold)
        )
        lease_id = w.lease_id
        task: dict[str, Any] | None = None
        client = victim.owner
        if not victim.is_actor and client is not None and not client.closed:
            body = {"worker_id": w.worker_id, "detail": detail, "retry": retry}
            try:
                task = await client.call("worker_oom_killed", body, timeout=_NOTICE_TIMEOUT)
            except Exception as e:  # it crashed or is stuck: the worker goes all the same
                logger.warning("the owner of worker %s did not answer: %s", w.pid, e)
        if task:
            what = f"task {task.get('name')} (task {task['task_id'].hex()})"
            retry = bool(task.get("retry"))
        elif victim.is_actor:
            what = f"actor {w.title or '?'} (actor {w.actor_id.hex() if w.actor_id else '?'})"
        else:
            what = f"task {w.title or '?'}"
        if victim.is_actor:
            after = "the actor restarts if its max_restarts allows"
        else:
            after = "the task will be retried" if retry else "the task fails with OutOfMemoryError"
        headline = (
            f"The memory monitor killed worker pid {w.pid} running {what} on node "
            f"{node_hex[:12]} ({raylet.args.node_ip}): memory {reading.fraction:.1%} "
            f"({_gib(reading.used)} of {_gib(reading.total)}) is above the threshold "
            f"{self.threshold:.0%}; {after}."
        )
        if w.lease_id != lease_id or w.track.state not in (WorkerState.LEASED, WorkerState.ACTOR):
            return  # its lease ended while we asked: judge again at the next refresh
        logger.error("%s\n%s", headline, detail)
        self._victim, self._victim_at = w, time.monotonic()
        raylet.leases.handle(ev.KillRequested(w, f"{headline}\n{detail}"))
        self.kills_total += 1
        self.kill_seq += 1
        self.kills.append(
            {
                "seq": self.kill_seq,
                "time": time.time(),
                "pid": w.pid,
                "worker_id": w.worker_id.hex(),
                "task": what,
                "is_actor": victim.is_actor,
                "retry": retry,
                "used_bytes": reading.used,
                "total_bytes": reading.total,
                "threshold": self.threshold,
                "message": headline,
                "detail": detail,
            }
        )

    def stats(self, kills_after: int = 0) -> dict[str, Any]:
        """For ``node_stats``: the settings, the last reading and the kills after a seq."""
        last = self.last
        return {
            "enabled": self.enabled,
            "refresh_ms": int(self.period * 1000),
            "threshold": self.threshold,
            "used_bytes": last.used if last else None,
            "total_bytes": last.total if last else None,
            "kills_total": self.kills_total,
            "kills_seq": self.kill_seq,
            "kills": [k for k in self.kills if k["seq"] > kills_after],
        }
