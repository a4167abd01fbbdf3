"""Finding a running cluster from a tool or driver process (``ember status``, ``ember memory``,
``init(address="auto")``): ``--address``, then ``EMBER_ADDRESS``, then the newest live session
under the temp dir; and finding the node of this machine that belongs to a given cluster."""

from __future__ import annotations

import glob
import os
import socket
import urllib.parse
from typing import Any

from ember.process_util import pid_runs
from ember.session import (
    DEFAULT_TEMP_DIR,
    live_session_dirs,
    read_node_info,
    temp_roots,
    unlist_live_session,
)


def _unix_alive(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def is_dashboard_url(address: str | None) -> bool:
    """``http://HOST:PORT`` (the dashboard) rather than the cluster's GCS address."""
    return bool(address) and address.startswith(("http://", "https://"))


def normalize_address(address: str) -> str:
    """``HOST:PORT`` → ``tcp:HOST:PORT``; a path → ``unix:path``; prefixed ones unchanged."""
    if address.startswith(("unix:", "tcp:")):
        return address
    if is_dashboard_url(address):
        raise ValueError(
            f"{address} is a dashboard's URL; this needs the cluster's address HOST:PORT (the "
            "head's GCS port, printed by `ember start --head`, 6379 by default)"
        )
    if "/" in address:
        return "unix:" + address
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(
            f"cannot read the cluster address {address!r}: expected HOST:PORT (the head's "
            "GCS port, printed by `ember start --head`) or 'auto'"
        )
    return "tcp:" + address


def _sessions(temp_dir: str | None) -> list[str]:
    """Sessions whose node may run, newest first: those the temp root lists as live (else,
    for a root written by an older Ember, every session)."""
    found: list[str] = []
    for root in temp_roots(temp_dir):
        listed = live_session_dirs(root)
        found.extend(glob.glob(os.path.join(root, "session_2*")) if listed is None else listed)
    return sorted(found, key=_mtime, reverse=True)


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0


def live_local_nodes(temp_dir: str | None = None) -> list[dict[str, Any]]:
    """Nodes started on this machine (``ember start`` or the Cluster helper) that still run,
    newest first: their ``node.json`` with a raylet socket that answers. A listed session
    whose raylet process is gone (killed: it could not unlist itself) is unlisted here."""
    nodes = []
    for session in _sessions(temp_dir):
        info = read_node_info(session)
        if _answers(info):
            nodes.append(info)
        elif _raylet_gone(session, info):
            unlist_live_session(session)
    return nodes


def _raylet_gone(session: str, info: dict[str, Any] | None) -> bool:
    """Whether the session's raylet process has exited (False while it may be starting:
    no node.json yet, or its pid still runs)."""
    if info is None:
        return not os.path.isdir(session)
    pid = (info.get("pids") or {}).get("raylet")
    if not isinstance(pid, int) or pid <= 0:
        return False
    return not pid_runs(pid)  # another user's process runs too


def live_node(session: str | None) -> dict[str, Any] | None:
    """The ``node.json`` of the node of ``session`` if its raylet still answers."""
    info = read_node_info(session) if session else None
    return info if _answers(info) else None


def _answers(info: dict[str, Any] | None) -> bool:
    """Whether the raylet a ``node.json`` names answers on its socket."""
    raylet = (info or {}).get("raylet_address", "")
    return raylet.startswith("unix:") and _unix_alive(raylet[5:])


class SeveralClusters(ConnectionError):
    """``auto`` (or no address) found more than one cluster running here: the message names
    each and how to choose, instead of joining the newest, which may be anyone's."""


def local_node_for(address: str | None, temp_dir: str | None = None) -> dict[str, Any] | None:
    """This machine's live node of the cluster at ``address`` (the one cluster running here
    when None or ``auto``: SeveralClusters when there are more); the head first when several
    nodes of it run here."""
    nodes = live_local_nodes(temp_dir)
    if not address or address == "auto":
        nodes = _with_other_roots(nodes, temp_dir)
        _refuse_several(nodes, temp_dir)
    else:
        want = normalize_address(address)
        mine = nodes
        nodes = [n for n in mine if want in (n.get("gcs_address"), n.get("gcs_unix_address"))]
        if not nodes:
            nodes = _registered_head(want)
        if not nodes and want.startswith("tcp:"):  # 127.0.0.1:PORT for NODE_IP:PORT
            nodes = [n for n in mine + _registered_heads() if _same_port(n, want)]
    local_ips = _local_ips()
    nodes = [n for n in nodes if n.get("node_ip") in local_ips] or nodes
    # The node under the temp dir the caller named, then the head.
    mine = os.path.abspath(temp_dir) if temp_dir else None
    nodes.sort(key=lambda n: (n.get("temp_dir") != mine, not n.get("head")))
    return nodes[0] if nodes else None


def _with_other_roots(nodes: list[dict[str, Any]], temp_dir: str | None) -> list[dict[str, Any]]:
    """With no temp dir named (neither ``temp_dir`` nor EMBER_TMPDIR), the heads this user
    runs under other temp dirs count too: "the cluster" is then any of the machine's."""
    if temp_dir or os.environ.get("EMBER_TMPDIR"):
        return nodes
    seen = {n.get("session_dir") for n in nodes}
    return nodes + [n for n in _registered_heads() if n.get("session_dir") not in seen]


def _refuse_several(nodes: list[dict[str, Any]], temp_dir: str | None) -> None:
    clusters: dict[str, dict[str, Any]] = {}
    local = _local_ips() | {"localhost"}
    for node in nodes:  # one line per cluster: its head when it runs here
        key = _cluster_key(node, local)
        if key not in clusters or (node.get("head") and not clusters[key].get("head")):
            clusters[key] = node
    if len(clusters) < 2:
        return
    where = (
        f"under {', '.join(temp_roots(temp_dir))}"
        if temp_dir or os.environ.get("EMBER_TMPDIR")
        else "on this machine"
    )
    lines = [
        f"  {_shown_address(n):<24} temp dir {n.get('temp_dir') or '?'}, started "
        f"{_started(n.get('session_dir') or '')}{'' if n.get('head') else ' (a worker node here)'}"
        for n in sorted(clusters.values(), key=lambda n: n.get("session_dir") or "")
    ]
    raise SeveralClusters(
        f"{len(clusters)} Ember clusters run {where}, so 'auto' will not guess which one:\n"
        + "\n".join(lines)
        + "\nName one: ember.init(address='HOST:PORT') or EMBER_ADDRESS=HOST:PORT (the CLI: "
        "--address HOST:PORT), or its temp dir (ember.init(temp_dir=...), --temp-dir, "
        "EMBER_TMPDIR) when it is the only cluster there."
    )


def _cluster_key(node: dict[str, Any], local_ips: set[str]) -> str:
    """Which cluster a node belongs to: its GCS address, where a GCS on this machine is one
    port whatever address of it a node was given (127.0.0.1:P and NODE_IP:P)."""
    address = node.get("gcs_address", "")
    host, _, port = address.removeprefix("tcp:").rpartition(":")
    if address.startswith("tcp:") and host in local_ips:
        return f"local:{port}"
    return address


def _shown_address(node: dict[str, Any]) -> str:
    address = node.get("gcs_address", "")
    return address[4:] if address.startswith("tcp:") else address


def _started(session_dir: str) -> str:
    """A session's start, from its name (``session_2026-11-28_08-50-33_123456_<pid>``)."""
    parts = os.path.basename(session_dir).split("_")
    if len(parts) >= 3 and parts[0] == "session":
        return f"{parts[1]} {parts[2].replace('-', ':')}"
    return "at an unknown time"


def _registered_head(gcs_address: str) -> list[dict[str, Any]]:
    """The head of that cluster if it runs on this machine under another temp dir."""
    from ember.session import registered_head_session

    info = live_node(registered_head_session(gcs_address))
    return [info] if info else []


def _registered_heads() -> list[dict[str, Any]]:
    """This machine's live heads under any temp dir (``register_head``)."""
    from ember.session import registered_head_sessions

    return [info for info in map(live_node, registered_head_sessions()) if info]


def _same_port(node: dict, want: str) -> bool:
    """``localhost:PORT`` and ``<this host's IP>:PORT`` name the same local GCS."""
    have = node.get("gcs_address", "")
    if not have.startswith("tcp:"):
        return False
    host, port = want[4:].rsplit(":", 1)
    return have.rsplit(":", 1)[1] == port and host in _local_ips() | {"localhost"}


def _local_ips() -> set[str]:
    """This network namespace's addresses (nodes in other namespaces share the disk)."""
    try:
        import psutil

        return {
            a.address
            for addrs in psutil.net_if_addrs().values()
            for a in addrs
            if a.family == socket.AF_INET
        }
    except Exception:
        return {"127.0.0.1"}


def find_gcs_address(address: str | None = None, temp_dir: str | None = None) -> str:
    """The GCS address to use; ConnectionError naming what was tried when there is none."""
    address = address or os.environ.get("EMBER_ADDRESS")
    if address and address != "auto":
        return normalize_address(address)
    node = local_node_for(None, temp_dir)
    if node is not None:
        return node.get("gcs_unix_address") or node["gcs_address"]
    root = temp_dir or os.environ.get("EMBER_TMPDIR") or DEFAULT_TEMP_DIR
    sessions = sorted(
        glob.glob(os.path.join(root, "session_2*")), key=os.path.getmtime, reverse=True
    )
    for session in sessions:
        sock = os.path.join(session, "sockets", "gcs")
        if os.path.exists(sock) and _unix_alive(sock):
            return "unix:" + sock
    raise ConnectionError(
        f"No running Ember cluster found under {root} (looked for a live GCS socket in its "
        "session directories). Start one with `ember start --head` or ember.init(), or pass "
        "--address."
    )


def token_for(
    gcs_address: str, temp_dir: str | None = None, token: str | None = None
) -> bytes | None:
    """The cluster token for a GCS: ``token`` (``--token``), else EMBER_TOKEN, else a local
    node of that cluster's file. ValueError when the given one is not a token's shape."""
    from ember.cluster_token import normalize, read_token, user_token

    given = normalize(user_token(token))
    if given is not None:
        return given
    if gcs_address.startswith("unix:"):
        return None
    node = local_node_for(gcs_address, temp_dir)  # includes a head under another temp dir
    if node is None or not node.get("token_file"):
        return None
    try:
        return read_token(node["token_file"])
    except (OSError, ValueError):
        return None


def local_node_for_dashboard(url: str, temp_dir: str | None = None) -> dict[str, Any] | None:
    """This machine's live head whose dashboard answers at ``url`` (its port, on loopback or
    one of this machine's IPs), to find the token in its session."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port
    if port is None or host not in _local_ips() | {"localhost", "0.0.0.0"}:
        return None
    for node in live_local_nodes(temp_dir) + _registered_heads():
        published = (node.get("dashboard") or {}).get("url") or ""
        if node.get("head") and urllib.parse.urlsplit(published).port == port:
            return node
    return None
