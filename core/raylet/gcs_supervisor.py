"""Starts the head's GCS again when its process dies, from inside the head's raylet.

The node starts the GCS before the raylet, so the first one is watched through a pidfd
(``AdoptedSupervisor``); a new one is the raylet's child, started with the same arguments on
the same Unix socket and TCP port, so every address the cluster was given still works. It
reads its tables back from storage (``ember.gcs.storage``), and the raylets, agents, workers
and drivers reconnect to it (``ember.gcs_link``) within their reconnect timeout. Deaths
share the agent's budget (``RestartBudget``): after too many within a minute it stays down,
the raylets give up at their timeout, and the node stops.
"""

from __future__ import annotations

import subprocess
from typing import Any

from ember.raylet.child_supervisor import AdoptedSupervisor


class GcsSupervisor(AdoptedSupervisor):
    """``spec``: ``{"argv": the GCS's arguments, "pid": the first GCS's pid}`` (the node's
    ``--gcs`` argument to the raylet; ``argv`` names the TCP port the first one bound)."""

    name = "gcs_server"

    def __init__(self, spec: dict[str, Any], session_dir: str) -> None:
        super().__init__(session_dir, int(spec["pid"]))
        self.argv: list[str] = _without(list(spec["argv"]), ("--parent-pid", "--ready-fd"))

    @property
    def pid(self) -> int:
        """The GCS's pid now: the node's first one, or the latest this raylet started."""
        return self.proc.pid if self.proc is not None else self._first_pid

    def _spawn(self) -> subprocess.Popen:
        return self._popen(["-m", "ember.gcs.server", *self.argv])


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """``argv`` less each of ``options`` and its value (the raylet passes its own)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        else:
            out.append(arg)
    return out
