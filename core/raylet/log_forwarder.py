"""Follows the node's worker log files and sends new lines to the drivers (``log_to_driver``).

Reads at most ``MAX_READ`` bytes per file per tick, so a worker printing in a tight loop
cannot stall the raylet; the rest is read on the next ticks. Lines from a worker go to the
drivers of the job it works for (or to all, when it has none yet).

A file that has not grown is looked at less and less often, down to once per
``MAX_SKIP`` ticks: a node of thousands of idle actors otherwise checked two files each ten
times a second (tens of thousands of ``stat`` calls a second, most of the raylet's time).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

MAX_READ = 1 << 20
TICK = 0.1
MAX_SKIP = 10  # ticks between looks at a file that has been quiet (1 s)


class _Followed:
    __slots__ = ("worker", "path", "stream", "offset", "partial", "skip", "due")

    def __init__(self, worker: Any, path: str, stream: str) -> None:
        self.worker = worker
        self.path = path
        self.stream = stream
        self.offset = 0
        self.partial = b""
        self.skip = 1  # ticks until the next look after this one (doubles while quiet)
        self.due = 0  # the tick of the next look


class LogForwarder:
    def __init__(self, raylet: Any) -> None:
        self.raylet = raylet
        self.files: dict[str, _Followed] = {}  # {path: _Followed}
        self._by_worker: dict[int, list[str]] = {}  # {id(worker): its paths}
        self._tick = 0
        self.drivers: dict[Any, bytes | None] = {}  # {driver connection: job id}

    def add_driver(self, conn: Any, job_id: bytes | None) -> None:
        self.drivers[conn] = job_id

    def remove_driver(self, conn: Any) -> None:
        self.drivers.pop(conn, None)

    def add_worker(self, worker: Any) -> None:
        out, err = worker.log_paths
        self.files[out] = _Followed(worker, out, "stdout")
        self.files[err] = _Followed(worker, err, "stderr")
        self._by_worker[id(worker)] = [out, err]

    def worker_exited(self, worker: Any) -> None:
        for path in self._by_worker.pop(id(worker), ()):
            f = self.files.pop(path, None)
            if f is not None:
                self._read(f, final=True)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            self._tick += 1
            if self.drivers:
                self.poll()

    def poll(self) -> None:
        """One tick: reads the files due for a look; a quiet one is looked at later."""
        tick = self._tick
        for f in list(self.files.values()):
            if f.due > tick:
                continue
            if self._read(f):
                f.skip = 1
            else:
                f.skip = min(f.skip * 2, MAX_SKIP)
            f.due = tick + f.skip

    async def final_flush(self) -> None:
        for f in list(self.files.values()):
            self._read(f, final=True)

    def _read(self, f: _Followed, final: bool = False) -> bool:
        """Sends what ``f`` gained since the last read; whether it had grown."""
        try:
            size = os.path.getsize(f.path)
        except OSError:
            return False
        if size < f.offset:  # truncated or rotated: start over
            f.offset = 0
        if size == f.offset:
            return False
        try:
            with open(f.path, "rb") as fh:
                fh.seek(f.offset)
                data = fh.read(MAX_READ)
        except OSError:
            return False
        f.offset += len(data)
        data = f.partial + data
        lines = data.split(b"\n")
        f.partial = lines.pop()
        if final and f.partial:
            lines.append(f.partial)
            f.partial = b""
        if not lines or not self.drivers:
            return True
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
        return True
