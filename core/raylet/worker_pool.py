"""The raylet's worker processes: start them, signal them, reap the dead. Which worker is
idle or leased is the lease machine's business (lease_machine.py).

Workers are plain processes running ``python -m ember.worker_main``; each opens its own log
files (``worker-<id>-<pid>.out/.err``) and registers back over the raylet's Unix socket.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

from ember.ids import new_unique_id
from ember.raylet.lease_records import Worker, is_host_key

logger = logging.getLogger("ember.raylet")


class WorkerProc(Worker):
    """A worker's process as the pool sees it; its lease state is the ``Worker`` part."""

    __slots__ = (
        "proc",
        "pid",
        "conn",
        "address",
        "started_at",
        "log_paths",
        "dead",
        "exit_reason",
        "kill_reason",
        "exit_code",
    )

    def __init__(self, worker_id: bytes, proc: Any) -> None:
        super().__init__(worker_id, time.monotonic())
        self.proc = proc  # subprocess.Popen or ForkedProc
        self.pid = proc.pid  # 0 until a forked worker's pid is known
        self.conn: Any = None
        self.address: str | None = None
        self.started_at = time.time()
        self.log_paths: tuple[str, str] | None = None
        self.dead = False  # its exit was seen by ``WorkerPool.reap``
        self.exit_reason = ""
        self.kill_reason = ""
        self.exit_code: int | None = None  # once reaped

    def public(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id.hex(),
            "pid": self.pid,
            "state": self.track.state.value,
            "title": self.title,
            # A host of shared-process actors names none: it holds many (its title says).
            "actor_id": None
            if self.actor_id is None or is_host_key(self.actor_id)
            else self.actor_id.hex(),
            "job_id": self.job_id.hex() if self.job_id else None,
            "started_at": self.started_at,
            "blocked": self.blocked,
            "log_paths": self.log_paths,
        }


FORK_FAILED = 255  # the exit code a worker whose fork failed is given


class ForkedProc:
    """A worker forked by the zygote, with the part of Popen's interface the pool uses."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.error = ""  # why it never started (the zygote's fork failed)
        self.pending_signal: int | None = None
        self._zygote = zygote

    def poll(self) -> int | None:
        if self.returncode is None and not self._zygote.alive():
            self.returncode = -signal.SIGKILL  # the zygote's children die with it
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.pid <= 0:
            # The zygote has not told us the pid yet. Never signal pid 0: that is our whole
            # process group (the driver included). Deliver it when the pid arrives.
            self._zygote.read_messages()
            if self.pid <= 0:
                self.pending_signal = sig
                return
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            self._zygote.read_messages(0.02)
        return self.returncode  # type: ignore[return-value]


class Zygote:
    """The fork server's client side (see zygote.py)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ember.raylet.zygote", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            close_fds=True,
        )
        self._buf = b""
        self._procs: dict[int, ForkedProc] = {}  # {pid: proc}
        self._pending: list[ForkedProc] = []  # spawned, pid not yet known
        self._exited: dict[int, int] = {}  # exits reported before their spawn was read
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.ready = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, args: list[str]) -> ForkedProc:
        # Requests sent before the zygote is ready wait in its pipe until its imports are done.
        self.proc.stdin.write((json.dumps({"spawn": args}) + "\n").encode())
        self.proc.stdin.flush()
        proc = ForkedProc(0, self)
        self._pending.append(proc)  # after the write: a failed one leaves no orphan entry
        return proc

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def read_messages(self, wait: float = 0.0) -> None:
        if wait:
            select.select([self.fileno()], [], [], wait)
        try:
            chunk = os.read(self.fileno(), 65536)
        except BlockingIOError:
            return
        if not chunk:
            return
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            msg = json.loads(line)
            if "ready" in msg:
                self.ready = True
            elif "spawned" in msg:
                proc = self._pending.pop(0)
                proc.pid = msg["spawned"]
                self._procs[proc.pid] = proc
                if proc.pid in self._exited:
                    proc.returncode = self._exited.pop(proc.pid)
                elif proc.pending_signal is not None:
                    proc.send_signal(proc.pending_signal)
            elif "spawn_failed" in msg:
                proc = self._pending.pop(0)
                proc.error = msg["spawn_failed"]
                proc.returncode = FORK_FAILED
            elif "exited" in msg:
                proc = self._procs.pop(msg["exited"], None)
                if proc is None:
                    self._exited[msg["exited"]] = msg["code"]
                else:
                    proc.returncode = msg["code"]

    def stop(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class WorkerPool:
    def __init__(self, node: dict[str, Any], use_zygote: bool = True) -> None:
        self.node = node
        self.workers: dict[bytes, WorkerProc] = {}  # {worker_id: WorkerProc}
        self.zygote: Zygote | None = None
        # The fork server starts with the first worker, not with the node: an idle node
        # does not pay its ~27 MB (the idle node's memory budget), and the first worker waits for its imports
        # about as long as a fresh interpreter would (spawn requests queue in its pipe).
        self._use_zygote = use_zygote
        self._reader_loop: asyncio.AbstractEventLoop | None = None

    def _fork_server(self) -> Zygote | None:
        """The zygote, started (and its pipe watched on the running loop) on first use."""
        if self.zygote is None and self._use_zygote:
            self._use_zygote = False  # one attempt: if it cannot start, workers are exec'd
            try:
                self.zygote = Zygote()
            except OSError as e:
                logger.warning("no fork server (%s); workers start as new processes", e)
                return None
            self._reader_loop = asyncio.get_running_loop()
            self._reader_loop.add_reader(self.zygote.fileno(), self.zygote.read_messages)
        return self.zygote

    def stop_reading(self) -> None:
        """Stops the loop's watch of the zygote's pipe (``stop_all`` reads it itself)."""
        if self._reader_loop is not None and self.zygote is not None:
            self._reader_loop.remove_reader(self.zygote.fileno())
            self._reader_loop = None

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
        if n.get("token_file"):  # a cluster node: the worker listens on TCP with the token
            cmd += ["--token-file", n["token_file"]]
        zygote = self._fork_server()
        proc: Any = None
        if zygote is not None and zygote.alive():
            try:
                proc = zygote.spawn(cmd[3:])
            except OSError as e:  # it died (its pipe is closed): exec this worker instead
                logger.warning("the fork server is gone (%s); starting a new process", e)
        if proc is None:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        w = WorkerProc(worker_id, proc)
        self.workers[worker_id] = w
        return w

    def reap(self) -> list[WorkerProc]:
        """Workers whose processes exited since the last call."""
        if self.zygote is not None:
            self.zygote.read_messages()
        dead = []
        for w in list(self.workers.values()):
            if w.dead:
                continue
            code = w.proc.poll()
            if code is None:
                continue
            w.dead = True
            w.exit_code = code
            error = getattr(w.proc, "error", "")
            w.exit_reason = w.kill_reason or error or describe_exit(code)
            dead.append(w)
        return dead

    def forget(self, w: WorkerProc) -> None:
        self.workers.pop(w.worker_id, None)

    def kill(self, w: WorkerProc, reason: str, sig: int = signal.SIGKILL) -> None:
        w.kill_reason = reason
        w.proc.send_signal(sig)

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
        if self.zygote is not None:
            self.zygote.stop()


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
