"""Other nodes' logs, kept on the head: ``<session_dir>/node_logs/<node_id>/<name>``, written
from the ``log_chunk`` messages their agents send (``ember.agent.log_shipper``), so a node's
logs stay readable once it is gone: by the live dashboard (``AgentHub.call`` falls back to
them when the node's agent is not connected) and by the history server.

Chunks are written at their offsets in a thread (off the dashboard's loop), from a bounded
queue; past ``EMBER_HISTORY_NODE_LOGS_MAX_BYTES`` in all (1 GiB) new bytes are dropped.
Whatever is dropped is counted (``dropped.node_log_bytes`` in ``/api/cluster_status``) and
logged once per 1,000 drops.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import deque
from typing import Any

from ember.agent.logs import LogDir
from ember.log_files import check_name

logger = logging.getLogger("ember.dashboard")
NODE_LOGS_DIR = "node_logs"
_NODE_ID = re.compile(r"^[0-9a-f]{8,64}$")
MAX_QUEUE_BYTES = 32 * 1024 * 1024


def node_logs_dir(session_dir: str, node_id: str) -> str | None:
    """Where a node's shipped logs are, if it shipped any."""
    if not _NODE_ID.match(node_id):
        return None
    path = os.path.join(session_dir, NODE_LOGS_DIR, node_id)
    return path if os.path.isdir(path) else None


def shipped_logs(session_dir: str, node_id: str) -> LogDir | None:
    path = node_logs_dir(session_dir, node_id)
    return LogDir(path) if path else None


class NodeLogs:
    def __init__(self, session_dir: str, state: Any, max_bytes: int | None = None) -> None:
        self.session_dir = session_dir
        self.root = os.path.join(session_dir, NODE_LOGS_DIR)
        self.state = state
        self.max_bytes = max_bytes or int(
            os.environ.get("EMBER_HISTORY_NODE_LOGS_MAX_BYTES", str(1 << 30))
        )
        self.written = _du(self.root)
        self._queue: deque[tuple[str, str, int, bytes]] = deque()
        self._queued = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="ember-node-logs", daemon=True)
        self._thread.start()

    # -- the loop's side -------------------------------------------------------------------
    def chunk(self, node_id: str, msg: dict[str, Any]) -> None:
        """One ``log_chunk`` of ``node_id``'s agent (a bad one raises ``ValueError``)."""
        name, offset = str(msg["name"]), int(msg["offset"])
        try:
            check_name(name)
        except FileNotFoundError as e:
            raise ValueError(str(e)) from None
        if not _NODE_ID.match(node_id) or offset < 0:
            raise ValueError(f"bad log chunk of node {node_id[:12]}: offset {offset}")
        data = str(msg["data"]).encode("latin-1")
        with self._lock:
            full = self._queued + len(data) > MAX_QUEUE_BYTES
            if not full:
                self._queue.append((node_id, name, offset, data))
                self._queued += len(data)
        if full:
            self._drop(len(data), "the writer is behind")
        else:
            self._wake.set()

    def close(self, timeout: float = 5.0) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout)

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait()  # set by each chunk and by close: an idle head costs nothing
            self._wake.clear()
            with self._lock:
                items, self._queue = self._queue, deque()
                self._queued = 0
            for node_id, name, offset, data in items:
                self._write(node_id, name, offset, data)
            if self._stopping:
                return

    def _write(self, node_id: str, name: str, offset: int, data: bytes) -> None:
        path = os.path.join(self.root, node_id, name)
        try:
            grows = max(0, offset + len(data) - os.path.getsize(path))
        except OSError:
            grows = offset + len(data)
        if self.written + grows > self.max_bytes:
            self._drop(len(data), f"past {self.max_bytes} bytes of node logs")
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # O_NOFOLLOW: only a file of our own directory is written, never a link's target.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.pwrite(fd, data, offset)
            finally:
                os.close(fd)
            self.written += grows
        except OSError as e:
            self._drop(len(data), str(e))

    def _drop(self, n: int, why: str) -> None:
        # Called from both sides; the loop only reads these counts (one item set at a time).
        dropped = self.state.dropped
        dropped["node_log_bytes"] = dropped.get("node_log_bytes", 0) + n
        dropped["node_log_chunks"] = dropped.get("node_log_chunks", 0) + 1
        if dropped["node_log_chunks"] % 1000 == 1:
            logger.warning(
                "dropped a chunk of another node's log (%s); %d bytes dropped in all",
                why,
                dropped["node_log_bytes"],
            )


def _du(root: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total
