"""A node's log files, copied to the head as they grow, so they stay readable after the node
is gone (in the dashboard, the CLI and the history server).

Every agent but the head's (whose ``logs/`` already is the session directory's) reads what
each servable file of its ``logs/`` gained since the last round, at most ``ROUND_BYTES`` a
round, and sends it up its stream as ``log_chunk`` messages ``{name, offset, data}`` (the
bytes as latin-1 text: JSON carries any byte that way). The lowest priority on the stream:
after replies, samples and task events. The head writes each chunk at its offset
(``dashboard/node_logs.py``), so sending one again (a restarted agent starts from 0) only
rewrites the same bytes. A file that shrank (truncated in place) is sent again from its start;
a rotated file is a new name, sent whole.
"""

from __future__ import annotations

import os
from typing import Any

from ember.agent.logs import LogDir
from ember.log_files import LogFileRefused, open_log

CHUNK_BYTES = 256 * 1024
# Per round (one sample period, 2 s): ~0.5 MB/s of logs a node, so a chatty worker cannot
# crowd its node's samples and task events out of the stream.
ROUND_BYTES = int(os.environ.get("EMBER_LOG_SHIP_ROUND_BYTES", str(1024 * 1024)))


class LogShipper:
    def __init__(self, logs: LogDir, round_bytes: int = ROUND_BYTES) -> None:
        self.logs = logs
        self.round_bytes = round_bytes
        self.offsets: dict[str, int] = {}  # {name: bytes already sent}
        self.shipped_bytes = 0

    def round(self) -> list[dict[str, Any]]:
        """The next chunks to send (blocking file reads: run it in a thread)."""
        out: list[dict[str, Any]] = []
        budget = self.round_bytes
        files = sorted(self.logs.index(), key=lambda f: f.get("mtime") or 0)
        for f in files:
            name, size = f["name"], int(f.get("size") or 0)
            sent = self.offsets.get(name, 0)
            if size < sent:
                sent = 0  # truncated in place: its new contents from the start
            while size > sent and budget > 0:
                want = min(CHUNK_BYTES, size - sent, budget)
                data = self._read(name, sent, want)
                if not data:
                    break
                out.append(
                    {
                        "type": "log_chunk",
                        "name": name,
                        "offset": sent,
                        "data": data.decode("latin-1"),
                    }
                )
                sent += len(data)
                budget -= len(data)
                self.shipped_bytes += len(data)
            self.offsets[name] = sent
            if budget <= 0:
                break
        return out

    def _read(self, name: str, offset: int, size: int) -> bytes:
        try:
            with open_log(self.logs.path, name) as f:
                f.seek(offset)
                return f.read(size)
        except (OSError, LogFileRefused):
            return b""  # gone or refused since it was listed
