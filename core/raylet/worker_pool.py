"""The raylet's worker processes: start them, keep the idle ones, reap the dead.

Workers are plain processes running ``python -m ember.worker_main``; each opens its own log
files (``worker-<id>-<pid>.out/.err``) and registers back over the raylet's Unix socket.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any

from ember.ids import new_unique_id

logger = logging.getLogger("ember.raylet")


class WorkerProc:
    __slots__ = (
        "worker_id",
        "proc",
        "pid",
        "conn",
        "address",
        "state",
        "lease_id",
        "job_id",
        "title",
        "started_at",
        "registered",
        "actor_id",
        "log_paths",
        "blocked",
        "dead",
        "exit_reason",
        "tasks_run",
        "kill_reason",
    )

    def __init__(self, worker_id: bytes, proc: subprocess.Popen) -> None:
        self.worker_id = worker_id
        self.proc = proc
        self.pid = proc.pid
        self.conn: Any = None
        self.address: str | None = None
        self.state = "STARTING"  # STARTING, IDLE, LEASED, ACTOR, DEAD
        self.lease_id: int | None = None
        self.job_id: bytes | None = None
        self.title = ""
        self.started_at = time.time()
        self.registered = asyncio.get_running_loop().create_future()
        self.actor_id: bytes | None = None
        self.log_paths: tuple[str, str] | None = None
        self.blocked = False
        self.dead = False
        self.exit_reason = ""
        self.tasks_run = 0
        self.kill_reason = ""

    def public(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id.hex(),
            "pid": self.pid,
            "state": self.state,
            "title": self.title,
            "actor_id": self.actor_id.hex() if self.actor_id else None,
            "job_id": self.job_id.hex() if self.job_id else None,
            "started_at": self.started_at,
            "blocked": self.blocked,
            "log_paths": self.log_paths,
        }


class WorkerPool:
    def __init__(self, node: dict[str, Any]) -> None:
        self.node = node
        self.workers: dict[bytes, WorkerProc] = {}  # {worker_id: WorkerProc}
        self.idle: list[WorkerProc] = []
        self.starting = 0

    def start_worker(self) -> WorkerProc:
        worker_id = new_unique_id()
        n = self.node
        cmd = [
            sys.executable,
            "-m",
            "ember.worker_main",
            "--worker-id",
            worker_id.hex(),
            "--node-id",
            n["node_id"].hex(),
            "--session-dir",
            n["session_dir"],
            "--raylet-address",
            n["raylet_address"],
            "--gcs-address",
            n["gcs_address"],
            "--arena-path",
            n["arena_path"],
            "--arena-capacity",
            str(n["arena_capacity"]),
            "--node-ip",
            n.get("node_ip", "127.0.0.1"),
            "--raylet-pid",
            str(os.getpid()),
        ]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=False,
        )
        w = WorkerProc(worker_id, proc)
        self.workers[worker_id] = w
        self.starting += 1
        return w

    def reap(self) -> list[WorkerProc]:
        """Workers whose processes exited since the last call."""
        dead = []
        for w in list(self.workers.values()):
            if w.dead:
                continue
            code = w.proc.poll()
            if code is None:
                continue
            w.dead = True
            w.exit_reason = describe_exit(code) if not w.kill_reason else w.kill_reason
            dead.append(w)
        return dead

    def forget(self, w: WorkerProc) -> None:
        self.workers.pop(w.worker_id, None)
        if w in self.idle:
            self.idle.remove(w)

    def kill(self, w: WorkerProc, reason: str, sig: int = signal.SIGKILL) -> None:
        w.kill_reason = reason
        try:
            os.kill(w.pid, sig)
        except ProcessLookupError:
            pass

    def stop_all(self, grace: float = 1.0) -> None:
        alive = [w for w in self.workers.values() if w.proc.poll() is None]
        for w in alive:
            try:
                w.proc.terminate()
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        for w in alive:
            remaining = deadline - time.monotonic()
            try:
                w.proc.wait(max(remaining, 0.01))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                try:
                    w.proc.wait(1.0)
                except subprocess.TimeoutExpired:
                    pass


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        hint = (
            " (the kernel's out-of-memory killer, or another process, sent it)"
            if (-code == signal.SIGKILL)
            else ""
        )
        return f"the worker process was killed by signal {-code} ({name}){hint}"
    return f"the worker process exited with code {code}"
