"""Connecting a driver to a running cluster (``init(address="auto" | "HOST:PORT")``).

A driver works through a node of its own machine (its raylet leases workers, its store holds
the driver's objects), as in Ray: so it looks for this machine's live node of that cluster
(``node.json`` in a session directory, see ``LocalNode.write_info``) and uses its addresses and
token file. The GCS on the head is reached by Unix socket when the driver is on the head.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ember.cluster_address import local_node_for, normalize_address


def connect_info(address: str, temp_dir: str | None) -> dict[str, Any]:
    """The node dict a driver's CoreWorker needs; ConnectionError saying what to do if none."""
    node = local_node_for(address, temp_dir)
    if node is None:
        if address == "auto":
            raise ConnectionError(
                "ember.init(address='auto') found no running Ember node on this machine "
                f"(looked in the session directories under {_roots(temp_dir)}). Start one "
                "with `ember start --head`, or call ember.init() without an address."
            )
        target = normalize_address(address)
        problem = _unreachable(target)
        if problem:
            raise ConnectionError(f"Could not reach an Ember cluster at {address}: {problem}")
        raise ConnectionError(
            f"The Ember cluster at {address} answers, but no node of it runs on this machine: "
            f"a driver needs one. Run `ember start --address={address}` here first."
        )
    gcs = node.get("gcs_unix_address") or node["gcs_address"]
    return {
        "node_id": bytes.fromhex(node["node_id"]),
        "session_dir": node["session_dir"],
        "raylet_address": node["raylet_address"],
        "gcs_address": gcs,
        "cluster_address": node["gcs_address"],
        "arena_path": node["arena_path"],
        "arena_capacity": node["arena_capacity"],
        "node_ip": node["node_ip"],
        "token_file": node["token_file"],
        "dashboard_url": (node.get("dashboard") or {}).get("url", ""),
    }


def _roots(temp_dir: str | None) -> str:
    from ember.session import temp_roots

    return ", ".join(temp_roots(temp_dir))


def _unreachable(address: str) -> str:
    """Why a TCP address does not answer ('' if it does)."""
    if not address.startswith("tcp:"):
        return "" if os.path.exists(address[5:]) else f"no socket at {address[5:]}"
    host, _, port = address[4:].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=3.0).close()
        return ""
    except OSError as e:
        return str(e)
