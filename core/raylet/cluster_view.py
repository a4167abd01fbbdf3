"""The other live nodes as this raylet last heard of them from the GCS (heartbeat replies,
``get_cluster_view``). Plain data: the lease machine reads it to spill work, the object
service to find a node's addresses, and the membership shell replaces it.
"""

from __future__ import annotations

from typing import Any


class ClusterView:
    """The other nodes' entries as the GCS sends them: ``node_id``, ``total``,
    ``available``, ``tcp_address``, ``data_address``… (this node is left out)."""

    __slots__ = ("nodes", "by_id")

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.by_id: dict[bytes, dict[str, Any]] = {}

    def replace(self, view: list[dict[str, Any]], here: bytes) -> None:
        """Takes a whole new view (this node's own entry, ``here``, is dropped)."""
        others = [n for n in view if n["node_id"] != here]
        self.nodes = others
        self.by_id = {n["node_id"]: n for n in others}

    def remove(self, node_id: bytes) -> None:
        """A node the GCS said died, before the next whole view arrives."""
        self.nodes = [n for n in self.nodes if n["node_id"] != node_id]
        self.by_id.pop(node_id, None)
