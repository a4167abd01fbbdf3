"""What the agent reports about its node's health, as cluster events: the disk holding the
session's logs running out of space (or inodes), and back; a worker that died while running a
task or an actor, with the end of its stderr; workers the raylet's memory monitor killed."""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any

import psutil

# Below this much free space on the disk holding the session's logs, the agent sends an error
# event (once, until space comes back): processes writing logs there will soon fail.
LOG_DISK_MIN_FREE = int(os.environ.get("EMBER_AGENT_LOG_DISK_MIN_FREE", str(100 * 2**20)))


class NodeHealth:
    """Appends its events to ``events`` (the agent's outgoing queue); reads worker logs
    through ``logs`` (the agent's log index)."""

    def __init__(self, events: deque[dict[str, Any]], logs: Any) -> None:
        self.events = events
        self.logs = logs
        self.known_workers: dict[int, dict[str, Any]] = {}
        self.log_disk_low = False  # an event said the logs' disk is (nearly) full
        self.oom_kill_seq = 0  # the last memory-monitor kill reported

    def check_log_disk(self) -> dict[str, Any]:
        """Free space where the session's logs go; an ERROR event when it falls below
        ``LOG_DISK_MIN_FREE`` (or it has no free inodes left), an INFO one when
        it is back above. The log endpoints keep serving either way: they only read."""
        path = self.logs.path
        try:
            usage = psutil.disk_usage(path)
        except OSError as e:
            return {"path": path, "error": str(e)}
        mount = _mount_of(path)
        low = usage.free < LOG_DISK_MIN_FREE or self._enospc_seen()
        if low and not self.log_disk_low:
            self.events.append(
                {
                    "type": "event",
                    "severity": "ERROR",
                    "kind": "LOG_DISK_FULL",
                    "source": "agent",
                    "time": time.time(),
                    "message": (
                        f"the disk holding this node's logs ({mount}) is nearly full: "
                        f"{_mb(usage.free)} free of {_mb(usage.total)} (below "
                        f"{_mb(LOG_DISK_MIN_FREE)}, EMBER_AGENT_LOG_DISK_MIN_FREE); logs may "
                        f"be truncated; free space on {mount} or move temp_dir "
                        "(ember start --temp-dir, ember.init(temp_dir=...)) to a larger disk"
                    ),
                    "detail": f"logs: {path}",
                }
            )
        elif not low and self.log_disk_low:
            self.events.append(
                {
                    "type": "event",
                    "severity": "INFO",
                    "kind": "LOG_DISK_OK",
                    "source": "agent",
                    "time": time.time(),
                    "message": f"the disk holding this node's logs ({mount}) has "
                    f"{_mb(usage.free)} free again",
                }
            )
        self.log_disk_low = low
        return {
            "path": path,
            "mount": mount,
            "free_bytes": usage.free,
            "total_bytes": usage.total,
            "min_free_bytes": LOG_DISK_MIN_FREE,
            "low": low,
        }

    def _enospc_seen(self) -> bool:
        """Whether creating a file there would fail with ENOSPC for want of inodes (a disk
        can run out of them with bytes to spare; many small worker logs do that)."""
        try:
            st = os.statvfs(self.logs.path)
        except OSError:
            return False
        return st.f_files > 0 and st.f_favail == 0

    def report_exits(
        self, current: dict[int, dict[str, Any]], exits: Any = (), stopping: bool = False
    ) -> None:
        """A worker gone while running a task or an actor crashed: an error event with the
        end of its stderr (its traceback, when Python printed one). Exits the raylet says
        were asked for (an actor killed or ended, a job's supervisor done) are not crashes."""
        asked = {pid for pid, _reason, intended in exits if intended}
        for pid, old in self.known_workers.items():
            if pid in current or old["kind"] != "worker" or pid in asked:
                continue
            if old["state"] in ("RUNNING", "ACTOR") and not stopping:
                detail = self._stderr_tail(pid)
                what = old.get("current_task") or old.get("actor_class") or "a task"
                self.events.append(
                    {
                        "type": "event",
                        "severity": "ERROR",
                        "kind": "WORKER_DIED",
                        "pid": pid,
                        "source": "worker",
                        "time": time.time(),
                        "message": f"worker {pid} exited while running {what}",
                        "detail": detail,
                    }
                )
        self.known_workers = current

    def report_oom_kills(self, monitor: dict[str, Any]) -> None:
        """The raylet's memory monitor killed workers: an error event for each, with the
        usage, the biggest users and what to do in its detail."""
        seq = monitor.get("kills_seq", 0)
        if seq < self.oom_kill_seq:
            self.oom_kill_seq = 0  # a new raylet counts from 0 again
        for kill in monitor.get("kills") or ():
            if kill["seq"] <= self.oom_kill_seq:
                continue
            self.oom_kill_seq = kill["seq"]
            self.events.append(
                {
                    "type": "event",
                    "severity": "ERROR",
                    "kind": "WORKER_OOM_KILLED",
                    "pid": kill["pid"],
                    "source": "raylet",
                    "time": kill["time"],
                    "message": kill["message"],
                    "detail": kill["detail"],
                }
            )

    def _stderr_tail(self, pid: int) -> str | None:
        for f in self.logs.index():
            if f.get("pid") == pid and f.get("stream") == "err":
                try:
                    return "\n".join(self.logs.tail(f["name"], 40)["lines"])
                except OSError:
                    return None
        return None


def _mount_of(path: str) -> str:
    """The mount point of the filesystem holding ``path``."""
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _mb(n: float) -> str:
    return f"{n / 2**20:.0f} MiB"
