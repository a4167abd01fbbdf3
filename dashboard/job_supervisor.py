"""The supervisor of one submitted job: a detached async Ember actor (Ray's ``JobSupervisor``)
that runs the job's entrypoint on the node the scheduler picked for the entrypoint's resources.

It is created by the dashboard's job manager (``job_manager.py``) and runs in a worker, so it
imports only the standard library and the runtime: a worker unpickles this class by importing
this module. The entrypoint is the user's own shell command, run by the shell as Ray runs it
(nothing is interpolated into it), in a new session so that its whole process group can be
signalled on stop, under ``job_guard.py``, which ends that group if this actor's worker dies
(its node died). Its stdout and stderr go to ``logs/job-driver-<submission_id>.log`` of the
node's session, which the node's agent indexes and serves like any other log.

The actor outlives the entrypoint on purpose: the manager asks ``wait`` for the outcome and
kills the actor only once that outcome is recorded, so a dashboard that restarts meanwhile
still learns it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from ember import runtime_env_packages as packages
from ember.log_files import open_log

# Ray's defaults, and Ray's variables to change them.
STOP_SIGNAL = os.environ.get("RAY_JOB_STOP_SIGNAL", "SIGTERM")
STOP_WAIT_S = float(os.environ.get("RAY_JOB_STOP_WAIT_TIME_S", "3"))
TAIL_LINES = 10  # of the log, in a failed job's message (Ray's NUM_LOG_LINES_ON_ERROR)
TAIL_CHARS = 20_000  # Ray's MAX_LOG_SIZE
POLL_S = 0.1
GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "job_guard.py")


def log_name(submission_id: str) -> str:
    return f"job-driver-{submission_id}.log"


class JobSupervisor:
    def __init__(
        self,
        submission_id: str,
        entrypoint: str,
        env_vars: dict[str, str],
        cluster_address: str,
        package: str | None = None,
        modules: list[str] | None = None,
    ) -> None:
        self.submission_id = submission_id
        self.entrypoint = entrypoint
        self.env_vars = env_vars
        self.cluster_address = cluster_address
        self.package = package  # the runtime_env's working_dir package (its zip's name)
        self.modules = modules or []  # the same, of each of its py_modules
        self.proc: subprocess.Popen | None = None
        self.stopped = False
        self.log_path = ""

    async def start(self) -> dict[str, Any]:
        """Starts the entrypoint; where it runs (node, pid, log file)."""
        import ember

        if self.proc is not None:  # a retried call: it runs already
            return self._where()
        session_dir = _session_dir()
        logs = os.path.join(session_dir, "logs")
        self.log_path = os.path.join(logs, log_name(self.submission_id))
        # The packages, from the head's copy (through the GCS when this is another node), in a
        # thread: a large one must not hold up the supervisor's other calls.
        cwd = None
        if self.package is not None:
            cwd = await asyncio.to_thread(_ensure, session_dir, "working_dir_files", self.package)
        dirs = [
            await asyncio.to_thread(_ensure, session_dir, "py_modules_files", name)
            for name in self.modules
        ]
        env = dict(os.environ)
        # The entrypoint is a driver of this cluster: its init() joins it (RAY_ADDRESS for a
        # Ray program migrated with ``import ember as ray`` that still reads Ray's variable).
        env.update(
            EMBER_ADDRESS=self.cluster_address,
            RAY_ADDRESS=self.cluster_address,
            EMBER_JOB_SUBMISSION_ID=self.submission_id,
            RAY_JOB_SUBMISSION_ID=self.submission_id,
            EMBER_TMPDIR=os.path.dirname(session_dir.rstrip("/")),
        )
        # `python` in an entrypoint means the cluster's interpreter, as on a Ray node started
        # from an activated environment (a node started as .venv/bin/ember has no such PATH).
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
        env.update({str(k): str(v) for k, v in self.env_vars.items()})
        if self.env_vars:
            # The driver's init() makes them the job's runtime_env: its tasks and actors, on
            # any node, get them too (not only this process and its children).
            env["EMBER_JOB_ENV_VARS"] = json.dumps(
                {str(k): str(v) for k, v in self.env_vars.items()}
            )
        if dirs:
            # Each py_modules package holds its module's directory: the folder it is
            # unpacked in goes first on the entrypoint's import path.
            env["PYTHONPATH"] = os.pathsep.join([*dirs, env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            )
        with open(self.log_path, "ab") as out:
            # The guard leads the group and runs the entrypoint: the group dies with us.
            self.proc = subprocess.Popen(
                [sys.executable, "-S", GUARD, str(os.getpid()), self.entrypoint],
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
            )
        self.node_id = ember.get_runtime_context().get_node_id()
        return self._where()

    def _where(self) -> dict[str, Any]:
        assert self.proc is not None
        return {
            "pid": self.proc.pid,
            "node_id": self.node_id,
            "node_ip": _node_ip(),
            "log_name": log_name(self.submission_id),
        }

    async def wait(self) -> dict[str, Any]:
        """The entrypoint's outcome once it has exited."""
        assert self.proc is not None, "start() first"
        while self.proc.poll() is None:
            await asyncio.sleep(POLL_S)
        code = self.proc.returncode
        return {
            "exit_code": code,
            "stopped": self.stopped,
            "end_time": time.time(),
            "tail": "" if code == 0 or self.stopped else _tail(self.log_path),
        }

    async def stop(self) -> bool:
        """``stop_signal`` to the entrypoint's process group, SIGKILL to what is left of it
        after the grace. False if it had already exited."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        self.stopped = True
        sig = getattr(signal, STOP_SIGNAL, signal.SIGTERM)
        _killpg(self.proc.pid, sig)
        deadline = time.monotonic() + STOP_WAIT_S
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
        # The group, not only its leader: a child the shell left behind would be an orphan.
        _killpg(self.proc.pid, signal.SIGKILL)
        while self.proc.poll() is None:
            await asyncio.sleep(POLL_S)
        return True


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _session_dir() -> str:
    from ember import global_state

    return global_state.worker.node["session_dir"]


def _node_ip() -> str:
    from ember import global_state

    return global_state.worker.node.get("node_ip", "127.0.0.1")


def _tail(path: str) -> str:
    """The last lines of the log (at most ``TAIL_CHARS``), for a failed job's message."""
    try:
        # Never through a link: a job may replace its log with one (to the cluster token).
        with open_log(os.path.dirname(path), os.path.basename(path)) as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TAIL_CHARS))
            data = f.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", "replace").splitlines()[-TAIL_LINES:]
    return "\n".join(lines)[-TAIL_CHARS:]


def _ensure(session_dir: str, kind: str, name: str) -> str:
    from ember import global_state

    fetch = packages.fetch_through(global_state.worker.call_gcs_sync)
    return packages.ensure(session_dir, kind, name, fetch)
