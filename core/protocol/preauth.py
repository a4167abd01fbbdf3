"""Limits on TCP peers that have not presented the cluster token yet, shared by every listener
of a process (the framed transport's and the raylet's data port; the agent hub, on gRPC, has
the same deadline through gRPC's own options).

Before the token, a peer is a stranger, and a stranger must not cost a listener more than a
few kilobytes, a few seconds, or more than a handful of sockets:

- its first frame is at most ``codec.MAX_AUTH_FRAME`` bytes, refused as soon as its 4-byte
  header announces more (a peer once made the GCS buffer up to 4 GiB this way, in a report);
- it must have presented the token within ``deadline`` seconds of connecting, or it is
  disconnected (500 idle connections once stayed open for good);
- one IP may hold at most ``per_ip`` unauthenticated connections to a listener at once; more
  are closed on arrival.

Every refusal is counted by kind (``refused``) and logged: the first of a kind at once, then
at most one line per kind every ``LOG_EVERY`` seconds with the count, so a flood cannot fill
the disk with its own log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

from ember import config

logger = logging.getLogger("ember.preauth")
LOG_EVERY = 10.0

# Kinds of refusal, as counted and logged.
OVERSIZED = "oversized first frame"
DEADLINE = "no token within the deadline"
PER_IP = "too many unauthenticated connections from one address"
TOKEN = "wrong or missing cluster token"


def peer_ip(peername: Any) -> str:
    """The IP of a socket's peer (``getpeername()``: a tuple for TCP), "" when unknown."""
    if isinstance(peername, tuple) and peername:
        return str(peername[0])
    return ""


class PreAuthGuard:
    """Counts each IP's unauthenticated connections, and every refusal. Thread-safe: the data
    port serves a thread per connection."""

    def __init__(self, deadline: float, per_ip: int) -> None:
        self.deadline = deadline
        self.per_ip = per_ip
        self.refused: Counter[str] = Counter()
        self._pending: dict[tuple[str, str], int] = {}  # {(listener, ip): connections}
        self._lock = threading.Lock()
        self._logged_at: dict[str, float] = {}

    def admit(self, listener: str, ip: str) -> bool:
        """Takes a slot for a new unauthenticated connection from ``ip``; False (the caller
        refuses it) when that IP already holds ``per_ip`` of them on this listener."""
        key = (listener, ip)
        with self._lock:
            held = self._pending.get(key, 0)
            if held >= self.per_ip:
                return False
            self._pending[key] = held + 1
            return True

    def release(self, listener: str, ip: str) -> None:
        """The connection authenticated or closed: its slot is free."""
        key = (listener, ip)
        with self._lock:
            held = self._pending.get(key, 0) - 1
            if held > 0:
                self._pending[key] = held
            else:
                self._pending.pop(key, None)

    def pending(self, listener: str, ip: str) -> int:
        with self._lock:
            return self._pending.get((listener, ip), 0)

    def refuse(self, listener: str, peer: Any, kind: str, detail: str = "") -> None:
        """Counts one refusal and logs it (rate-limited per kind)."""
        now = time.monotonic()
        with self._lock:
            self.refused[kind] += 1
            count = self.refused[kind]
            last = self._logged_at.get(kind)
            if last is not None and now - last < LOG_EVERY:
                return
            self._logged_at[kind] = now
        logger.warning(
            "%s: refused a connection from %s: %s%s (%d refused for this reason so far)",
            listener,
            peer,
            kind,
            f" ({detail})" if detail else "",
            count,
        )


# One per process: its listeners share the limits of config (EMBER_AUTH_DEADLINE_SECONDS,
# EMBER_MAX_UNAUTHENTICATED_PER_IP).
GUARD = PreAuthGuard(config.auth_deadline_seconds, config.max_unauthenticated_per_ip)

__all__ = [
    "DEADLINE",
    "GUARD",
    "OVERSIZED",
    "PER_IP",
    "PreAuthGuard",
    "TOKEN",
    "peer_ip",
]
