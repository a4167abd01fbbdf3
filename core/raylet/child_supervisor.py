"""Keeps the node's agent running, from inside the raylet: starts it, and starts
it again when it dies, giving up after ``MAX_RESTARTS`` deaths within ``WINDOW`` seconds. The
head's agent runs in the dashboard's process instead, where ``keep_running`` does the same.

The raylet owns the node's processes and outlives the agent, so it is the agent's parent: a
separate supervisor process cost ~12 MB of resident memory on every idle node.
The agent ties its life to the raylet (``--parent-pid``: ``PR_SET_PDEATHSIG``), so on a
daemon node (``ember start``, no driver) it ends with the raylet, e.g. after the head went
away; on an embedded node the raylet itself dies with the driver. ``stop`` (the raylet's
SIGTERM) stops it first. ``ChildSupervisor`` is that policy for any process of the raylet's;
the head's dashboard (``dashboard_supervisor``) and GCS (``gcs_supervisor``) are the others,
``AdoptedSupervisor``s: the node started their first process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

from ember.process_util import wait_ready_line

logger = logging.getLogger("ember.raylet")
MAX_RESTARTS = 5
WINDOW = 60.0
POLL = 0.5  # how often the agent's exit is checked (a restart is not urgent)
STOP_GRACE = 2.0


class RestartBudget:
    """How soon to restart after a death (longer after each), or never again once there
    were more than ``MAX_RESTARTS`` deaths within ``WINDOW`` seconds."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def died(self) -> float | None:
        now = time.time()
        self.times = [t for t in self.times if now - t < WINDOW] + [now]
        if len(self.times) > MAX_RESTARTS:
            return None
        return min(0.5 * len(self.times), 3.0)


async def keep_running(
    run_once: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    on_death: Callable[[BaseException, bool], None],
) -> None:
    """The head's agent, in the dashboard's process: ``run_once()`` runs a new agent until
    ``stop``; when it fails instead, ``on_death(error, restarting)`` is told and a new one
    starts, within the same budget as a process's restarts."""
    budget = RestartBudget()
    while not stop.is_set():
        try:
            await run_once()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            delay = budget.died()
            on_death(e, delay is not None)
            if delay is None:
                return
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except TimeoutError:
                pass


class ChildSupervisor:
    """A process of the node kept running by the raylet, its parent: ``_spawn()`` starts
    it; a death is logged and followed by a new one after ``RestartBudget``'s delay until
    the budget is spent; ``stop()`` ends it. ``name`` names it in the raylet's log and its
    output files (``logs/<name>.out``, ``.err``)."""

    name = "process"

    def __init__(self, session_dir: str) -> None:
        self.logs = os.path.join(session_dir, "logs")
        self.proc: subprocess.Popen | None = None
        self.deaths = RestartBudget()
        self.stopping = False
        self._watch: asyncio.Future | None = None

    def _spawn(self) -> subprocess.Popen:
        raise NotImplementedError

    def _popen(self, argv: list[str], pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
        # From the loop's (main) thread: PR_SET_PDEATHSIG (the child's --parent-pid) fires
        # when the *thread* that started the child ends, and the main thread lives as long
        # as the raylet.
        with (
            open(os.path.join(self.logs, f"{self.name}.out"), "ab") as out,
            open(os.path.join(self.logs, f"{self.name}.err"), "ab") as err,
        ):
            return subprocess.Popen(
                [sys.executable, *argv, "--parent-pid", str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=pass_fds,
                close_fds=True,
            )

    def _alive(self) -> bool:
        """False once the process being watched exited (None: nothing to watch)."""
        return self.proc is None or self.proc.poll() is None

    def _report_exit(self) -> None:
        proc = self.proc
        assert proc is not None
        logger.warning("the %s (pid %d) exited with %s", self.name, proc.pid, proc.returncode)

    def _restarted(self) -> str:
        return f"restarted the {self.name} (pid {self.proc.pid})"

    async def _watch_loop(self) -> None:
        while not self.stopping:
            await asyncio.sleep(POLL)
            if self.stopping or self._alive():
                continue
            self._report_exit()
            self.proc = None
            if not await self._restart():
                return

    async def _restart(self) -> bool:
        """A new process after the budget's delay; False when the budget is spent (or the
        raylet is stopping). A start that fails (``OSError``) counts as another death."""
        while not self.stopping:
            delay = self.deaths.died()
            if delay is None:
                logger.error(
                    "the %s died %d times in %.0f s; not restarting it (see %s.log / %s.err)",
                    self.name,
                    len(self.deaths.times),
                    WINDOW,
                    self.name,
                    self.name,
                )
                return False
            await asyncio.sleep(delay)
            if self.stopping:
                return False
            try:
                self.proc = self._spawn()
            except OSError as e:
                logger.error("could not restart the %s: %s", self.name, e)
                continue
            logger.info(self._restarted())
            return True
        return False

    async def stop(self) -> None:
        """SIGTERM to the process; SIGKILL if it is still there after ``STOP_GRACE`` s."""
        self.stopping = True
        if self._watch is not None:
            self._watch.cancel()
        await terminate(self.proc)


class AdoptedSupervisor(ChildSupervisor):
    """A process the node started before the raylet (so not the raylet's child): the raylet
    watches it through a pidfd, which says when that very process exits whoever reaps it,
    and starts its replacements as its own children. ``first_pid``: the node's process."""

    def __init__(self, session_dir: str, first_pid: int) -> None:
        super().__init__(session_dir)
        self._first_pid = first_pid
        self._first_pidfd = _pidfd(first_pid)

    def start(self) -> None:
        self._watch = asyncio.ensure_future(self._watch_loop())

    def _alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        fd = self._first_pidfd
        if fd is None:
            return False
        readable, _, _ = select.select([fd], [], [], 0)
        if not readable:
            return True
        os.close(fd)
        self._first_pidfd = None
        return False

    def _report_exit(self) -> None:
        if self.proc is not None:
            super()._report_exit()
        else:  # the node's child: its exit status is the node's to read
            logger.warning("the %s (pid %d) exited", self.name, self._first_pid)

    async def stop(self) -> None:
        """Stops a process this raylet started (the first one is the node's to stop)."""
        if self._first_pidfd is not None:
            os.close(self._first_pidfd)
            self._first_pidfd = None
        await super().stop()


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` (readable once it exits), or None if it is already gone."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


class AgentSupervisor(ChildSupervisor):
    """The agent process of this node: ``argv`` are ``ember.agent``'s arguments."""

    name = "agent"

    def __init__(self, argv: list[str], session_dir: str) -> None:
        super().__init__(session_dir)
        self.argv = _with_component(list(argv), "raylet", os.getpid())

    def _spawn(self, ready_fd: int = -1) -> subprocess.Popen:
        extra = ["--ready-fd", str(ready_fd)] if ready_fd >= 0 else []
        return self._popen(
            ["-m", "ember.agent", *self.argv, *extra],
            (ready_fd,) if ready_fd >= 0 else (),
        )

    def launch(self, timeout: float) -> None:
        """Starts the agent and goes on: the raylet says it is ready without waiting for the
        agent's imports (~0.4 s of a node's start). An agent that does not say it is ready
        within ``timeout`` is logged with the end of its log, stopped if still silent, and
        then restarted like one that died."""
        r, w = os.pipe()
        try:
            self.proc = self._spawn(w)
        finally:
            os.close(w)
        deadline = time.monotonic() + timeout
        self._watch = asyncio.ensure_future(self._started_then_watch(self.proc, r, deadline))

    async def _started_then_watch(self, proc: subprocess.Popen, r: int, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            # A blocking wait on a pipe, in a thread: the raylet's loop keeps serving (the
            # agent connects to it before it says it is ready).
            await loop.run_in_executor(None, wait_ready_line, "agent", proc, r, deadline, self.logs)
        except Exception as e:
            if self.stopping:
                return
            logger.error("the agent did not start: %s", e)
            if proc.poll() is None:
                proc.kill()  # silent past its deadline: the watch below starts another
        await self._watch_loop()


class ModuleSupervisor(ChildSupervisor):
    """A Python module's process the raylet starts and keeps running (the head's autoscaler
    monitor): ``spec`` is ``{"name": log and process name, "argv": [module, args...]}``; the
    module must take ``--parent-pid``. Its output goes to ``logs/<name>.out`` / ``.err``."""

    def __init__(self, spec: dict, session_dir: str) -> None:
        super().__init__(session_dir)
        name = str(spec["name"])
        if not name.isidentifier():  # it names files under logs/
            raise ValueError(f"a supervised process name must be a plain word, got {name!r}")
        self.name = name
        self.argv = [str(a) for a in spec["argv"]]

    def _spawn(self) -> subprocess.Popen:
        return self._popen(["-m", *self.argv])

    def start(self) -> None:
        self.proc = self._spawn()
        logger.info("started the %s (pid %d)", self.name, self.proc.pid)
        self._watch = asyncio.ensure_future(self._watch_loop())


async def terminate(proc: subprocess.Popen | None) -> None:
    """SIGTERM; SIGKILL if the process is still there after ``STOP_GRACE`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while proc.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
        proc.wait(2.0)


def _with_component(argv: list[str], name: str, pid: int) -> list[str]:
    """``argv`` with ``name=pid`` added to its ``--components`` (the agent labels them)."""
    item = f"{name}={pid}"
    if "--components" in argv:
        i = argv.index("--components") + 1
        argv[i] = f"{argv[i]},{item}" if argv[i] else item
    else:
        argv += ["--components", item]
    return argv
