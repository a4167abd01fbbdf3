"""Follows the node's worker log files and sends new lines to the drivers (``log_to_driver``).

Reads at most ``MAX_READ`` bytes per file per tick, so a worker printing in a tight loop
cannot stall the raylet; the rest is read on the next ticks. Lines from a worker go to the
drivers of the job it works for (or to all, when it has none yet).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

MAX_READ = 1 << 20
TICK = 0.1


class _Followed:
    __slots__ = ("worker", "path", "stream", "offset", "partial")

    def __init__(self, worker: Any, path: str, stream: str) -> None:
        self.worker = worker
        self.path = path
        self.stream = stream
        self.offset = 0
        self.partial = b""


class LogForwarder:
    def __init__(self, raylet: Any) -> None:
        self.raylet = raylet
        self.files: dict[str, _Followed] = {}  # {path: _Followed}
        self.drivers: dict[Any, bytes | None] = {}  # {driver connection: job id}

    def add_driver(self, conn: Any, job_id: bytes | None) -> None:
        self.drivers[conn] = job_id

    def remove_driver(self, conn: Any) -> None:
        self.drivers.pop(conn, None)

    def add_worker(self, worker: Any) -> None:
        out, err = worker.log_paths
        self.files[out] = _Followed(worker, out, "stdout")
        self.files[err] = _Followed(worker, err, "stderr")

    def worker_exited(self, worker: Any) -> None:
        for path in list(self.files):
            f = self.files[path]
            if f.worker is worker:
                self._read(f, final=True)
                del self.files[path]

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            if self.drivers:
                for f in list(self.files.values()):
                    self._read(f)

    async def final_flush(self) -> None:
        for f in list(self.files.values()):
            self._read(f, final=True)

    def _read(self, f: _Followed, final: bool = False) -> None:
        try:
            size = os.path.getsize(f.path)
        except OSError:
            return
        if size < f.offset:  # truncated or rotated: start over
            f.offset = 0
        if size == f.offset:
            return
        try:
            with open(f.path, "rb") as fh:
                fh.seek(f.offset)
                data = fh.read(MAX_READ)
        except OSError:
            return
        f.offset += len(data)
        data = f.partial + data
        lines = data.split(b"\n")
        f.partial = lines.pop()
        if final and f.partial:
            lines.append(f.partial)
            f.partial = b""
        if not lines or not self.drivers:
            return
        w = f.worker
        body = {
            "pid": w.pid,
            "title": w.title if w.actor_id else "",
            "stream": f.stream,
            "lines": [line.decode("utf-8", "replace") for line in lines],
            "node_ip": self.raylet.args.node_ip,
        }
        for conn, job_id in list(self.drivers.items()):
            if conn.closed:
                continue
            if w.job_id is not None and job_id is not None and w.job_id != job_id:
                continue
            conn.send("log_lines", body)
