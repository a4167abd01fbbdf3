"""A provider's own table of the nodes it made and their tags, as a JSON file on the head, so
a restarted autoscaler (or ``ember down`` from another process) knows which host or job runs
which node. Every change is read-modify-write under an exclusive ``flock`` and lands with an
atomic rename: two processes using one provider never lose each other's changes, and a crash
never leaves half a file."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from typing import Any


class NodeTable:
    """``{node id: record}`` in ``path`` (a dict per node, the provider's own fields)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(os.path.expanduser(path))
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)

    def read(self) -> dict[str, dict[str, Any]]:
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}
        except json.JSONDecodeError as e:
            raise RuntimeError(
                f"the node table {self.path} is not valid JSON ({e}); move it aside to start "
                "afresh (nodes it listed are then no longer managed)"
            ) from None

    @contextlib.contextmanager
    def change(self) -> Iterator[dict[str, dict[str, Any]]]:
        """The table to modify in place; written back when the block ends without error."""
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            nodes = self.read()
            yield nodes
            tmp = f"{self.path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(nodes, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
