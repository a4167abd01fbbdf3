"""Where a listener binds and whether it demands the token: one rule for every listener.

Every TCP listener of a node (GCS, raylet, core workers, the raylet's data port, the
dashboard's agent hub, the dashboard's HTTP port) asks ``rule_for`` and follows its answer,
so the question "can someone on another machine reach this?" is answered in one place.

- A host is *local only* when it is a loopback address (``127.0.0.0/8``, ``::1``) or
  ``localhost``. Everything else is reachable from other hosts: a node IP, a name, and the
  empty host and the wildcards (``""``, ``0.0.0.0``, ``::``), which bind every interface.
  (``""`` once counted as loopback, and a dashboard started with ``--dashboard-host ""``
  served its whole API, kill included, to the network without a token.)
- A reachable listener always demands the token. A *cluster* listener (the framed
  transport, the data port, a cluster's agent hub) demands it on loopback too: loopback is
  shared with every user of the machine, and each of those listeners runs code or takes
  state from what it is sent. Only the dashboard's HTTP port of a loopback dashboard goes
  without, as Ray's does.
- A listener on a node IP also listens on loopback at the same port (``twin``), with the
  same token: tools on the head's machine say ``127.0.0.1:PORT``, as with Ray.
"""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def _bare(host: str) -> str:
    return host.strip().removeprefix("[").removesuffix("]")


def is_wildcard(host: str) -> bool:
    """``""``, ``0.0.0.0`` or ``::``: the listener takes every interface."""
    return _bare(host) in WILDCARD_HOSTS


def is_local_only(host: str) -> bool:
    """True only when nothing off this machine can reach a listener bound to ``host``."""
    bare = _bare(host)
    if bare.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False  # "" (every interface) and names: reachable until proven otherwise


def loopback_twin(host: str) -> str | None:
    """The loopback address a listener on ``host`` also listens on, at the same port, or
    None: a wildcard already covers loopback, a loopback host is one, and what a name
    resolves to is the user's choice."""
    try:
        ip = ipaddress.ip_address(_bare(host))
    except ValueError:
        return None
    if ip.is_loopback or ip.is_unspecified:
        return None
    return "::1" if ip.version == 6 else "127.0.0.1"


class ListenRule(NamedTuple):
    host: str  # what to bind
    twin: str | None  # also bind this loopback address at the same port
    token_required: bool
    reachable: bool  # other hosts can connect (say so when starting it)


def rule_for(host: str, *, cluster: bool) -> ListenRule:
    """How a listener on ``host`` listens. ``cluster``: a listener of the cluster's own wire
    (framed transport, data port, a cluster's agent hub), which demands the token even on
    loopback; otherwise (the dashboard's HTTP port, an embedded node's hub) only when
    reachable."""
    reachable = not is_local_only(host)
    return ListenRule(host, loopback_twin(host), cluster or reachable, reachable)


def shown_host(host: str) -> str:
    """The host to print in a URL for a listener on ``host`` (a wildcard is reached at
    loopback from this machine)."""
    return "127.0.0.1" if is_wildcard(host) else host


__all__ = [
    "ListenRule",
    "WILDCARD_HOSTS",
    "is_local_only",
    "is_wildcard",
    "loopback_twin",
    "rule_for",
    "shown_host",
]
