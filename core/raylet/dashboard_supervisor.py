"""Starts the head's dashboard again when it dies (a node's agent is restarted
if it dies, and the head's agent lives in the dashboard's process), from inside the raylet.

The node starts the dashboard before the raylet (``init()`` does not wait for its imports),
so the first one is not the raylet's child: the raylet watches it through a pidfd, which
says when that very process exits, whoever reaps it. A new one is the raylet's own child,
served on the same host and port, so the URL the user was given keeps working; it ties its
life to the raylet (``--parent-pid``) and the raylet stops it when it stops. Deaths share
the agent's budget (``RestartBudget``): after too many within a minute it stays down, and
the raylet's log says so. The new dashboard replays the session's history (what the dead
one wrote, all but its last unwritten second) before it serves; the agents stream the live
state again as they reconnect, and a cluster's worker nodes find the new hub address in the
GCS, where the new dashboard publishes it.
"""

from __future__ import annotations

import subprocess
from typing import Any

from ember.launch import DASHBOARD_MODULE, bind_port
from ember.raylet.child_supervisor import AdoptedSupervisor


class DashboardSupervisor(AdoptedSupervisor):
    """``spec``: ``{"argv", "host", "port", "pid"}`` from ``launch.start_dashboard`` and the
    node (the first dashboard's pid)."""

    name = "dashboard"

    def __init__(self, spec: dict[str, Any], session_dir: str) -> None:
        super().__init__(session_dir, int(spec["pid"]))
        self.argv: list[str] = list(spec["argv"])
        self.host: str = spec["host"]
        self.port: int = int(spec["port"])

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
