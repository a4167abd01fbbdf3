"""Connecting a driver to a running cluster (``init(address=...)``): see the cluster issue."""

from __future__ import annotations

from typing import Any


def connect_info(address: str, temp_dir: str | None) -> dict[str, Any]:
    raise ConnectionError(
        f"Could not connect to a cluster at {address!r}: joining a running cluster is not "
        "available in this build yet. Call ember.init() with no address to start a local node."
    )
