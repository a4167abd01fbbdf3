"""Starts the head's dashboard again when it dies (issue 4 §1: the node's agent is restarted
if it dies, and the head's agent lives in the dashboard's process), from inside the raylet.

The node starts the dashboard before the raylet (``init()`` does not wait for its imports),
so the first one is not the raylet's child: the raylet watches it through a pidfd, which
says when that very process exits, whoever reaps it. A new one is the raylet's own child,
served on the same host and port, so the URL the user was given keeps working; it ties its
life to the raylet (``--parent-pid``) and the raylet stops it when it stops. Deaths share
the agent's budget (``RestartBudget``): after too many within a minute it stays down, and
the raylet's log says so. What the dashboard held in memory (history, finished tasks) is
gone; the agents stream the live state again as they reconnect, and a cluster's worker
nodes find the new hub address in the GCS, where the new dashboard publishes it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import subprocess
import sys
from typing import Any

from ember.dashboard.agent_supervisor import POLL, RestartBudget, terminate
from ember.dashboard.launch import bind_port

logger = logging.getLogger("ember.raylet")


class DashboardSupervisor:
    """``spec``: ``{"argv", "host", "port", "pid"}`` from ``launch.start_dashboard`` and the
    node (the first dashboard's pid)."""

    def __init__(self, spec: dict[str, Any], session_dir: str) -> None:
        self.argv: list[str] = list(spec["argv"])
        self.host: str = spec["host"]
        self.port: int = int(spec["port"])
        self.logs = os.path.join(session_dir, "logs")
        self.deaths = RestartBudget()
        self.stopping = False
        self.proc: subprocess.Popen | None = None  # a dashboard this raylet started
        self._first_pid = int(spec["pid"])
        self._first_pidfd = _pidfd(self._first_pid)
        self._watch: asyncio.Future | None = None

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

    async def _watch_loop(self) -> None:
        while not self.stopping:
            await asyncio.sleep(POLL)
            if self.stopping or self._alive():
                continue
            if self.proc is not None:
                logger.warning(
                    "the dashboard (pid %d) exited with %s", self.proc.pid, self.proc.returncode
                )
            else:  # the node's child: its exit status is the node's to read
                logger.warning("the dashboard (pid %d) exited", self._first_pid)
            self.proc = None
            while not self.stopping:
                delay = self.deaths.died()
                if delay is None:
                    logger.error(
                        "the dashboard died %d times in a minute; not restarting it (see "
                        "dashboard.log / dashboard.err)",
                        len(self.deaths.times),
                    )
                    return
                await asyncio.sleep(delay)
                if self.stopping:
                    return
                try:
                    self.proc = self._spawn()
                except OSError as e:
                    # Most likely another program took the port meanwhile: the dashboard
                    # stays on its URL or not at all, so try again within the budget.
                    logger.error("could not restart the dashboard: %s", e)
                    continue
                logger.info(
                    "restarted the dashboard (pid %d) on %s:%d", self.proc.pid, self.host, self.port
                )
                break

    def _spawn(self) -> subprocess.Popen:
        # On the loop's (main) thread: the child's PR_SET_PDEATHSIG fires when the thread
        # that started it ends, and the main thread lives as long as the raylet.
        sock, _ = bind_port(self.host, self.port, exact=True)
        try:
            with (
                open(os.path.join(self.logs, "dashboard.out"), "ab") as out,
                open(os.path.join(self.logs, "dashboard.err"), "ab") as err,
            ):
                return subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "ember.dashboard.server",
                        *self.argv,
                        "--fd",
                        str(sock.fileno()),
                        "--parent-pid",
                        str(os.getpid()),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    pass_fds=(sock.fileno(),),
                    close_fds=True,
                )
        finally:
            sock.close()  # the dashboard has its own copy

    async def stop(self) -> None:
        """Stops a dashboard this raylet started (the first one is the node's to stop)."""
        self.stopping = True
        if self._watch is not None:
            self._watch.cancel()
        if self._first_pidfd is not None:
            os.close(self._first_pidfd)
            self._first_pidfd = None
        await terminate(self.proc)


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` (readable once it exits), or None if it is already gone."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None
