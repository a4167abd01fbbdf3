"""Starts the head's dashboard again when it dies (a node's agent is restarted
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
from typing import Any

from ember.launch import DASHBOARD_MODULE, bind_port
from ember.raylet.child_supervisor import ChildSupervisor

logger = logging.getLogger("ember.raylet")


class DashboardSupervisor(ChildSupervisor):
    """``spec``: ``{"argv", "host", "port", "pid"}`` from ``launch.start_dashboard`` and the
    node (the first dashboard's pid)."""

    name = "dashboard"

    def __init__(self, spec: dict[str, Any], session_dir: str) -> None:
        super().__init__(session_dir)
        self.argv: list[str] = list(spec["argv"])
        self.host: str = spec["host"]
        self.port: int = int(spec["port"])
        self._first_pid = int(spec["pid"])
        self._first_pidfd = _pidfd(self._first_pid)

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
            logger.warning("the dashboard (pid %d) exited", self._first_pid)

    def _restarted(self) -> str:
        return f"{super()._restarted()} on {self.host}:{self.port}"

    def _spawn(self) -> subprocess.Popen:
        # The same URL or none: a port another program took meanwhile is an OSError, which
        # ChildSupervisor counts as another death and retries within the budget.
        sock, _ = bind_port(self.host, self.port, exact=True)
        try:
            argv = ["-m", DASHBOARD_MODULE, *self.argv, "--fd", str(sock.fileno())]
            return self._popen(argv, (sock.fileno(),))
        finally:
            sock.close()  # the dashboard has its own copy

    async def stop(self) -> None:
        """Stops a dashboard this raylet started (the first one is the node's to stop)."""
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
