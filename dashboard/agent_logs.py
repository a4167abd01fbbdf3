"""The node's log files: an index by component and worker, and bounded reads.

Names come from the session's ``logs/`` directory (``worker-<id>-<pid>.err``,
``raylet.log``, ...). Every read names a file from the index, never a path from the request,
so nothing outside ``logs/`` can be read. Reads are bounded (a tail of at most 100,000 lines,
chunks of at most 4 MB, a search stops at ``max_matches``).
"""

from __future__ import annotations

import os
import re
from collections import deque
from typing import Any

_WORKER = re.compile(r"^(worker|driver)-([0-9a-f]+)-(\d+)\.(out|err|log)$")
MAX_CHUNK = 4 * 1024 * 1024


class LogDir:
    def __init__(self, path: str) -> None:
        self.path = path

    def index(self) -> list[dict[str, Any]]:
        try:
            entries = list(os.scandir(self.path))
        except OSError:
            return []
        files = []
        for e in entries:
            try:
                if not e.is_file():
                    continue
                st = e.stat()
            except OSError:
                continue  # deleted between listing and stat
            files.append({**describe(e.name), "size": st.st_size, "mtime": st.st_mtime})
        return files

    def _path(self, name: str) -> str:
        if os.sep in name or name.startswith(".") or not name:
            raise FileNotFoundError(f"{name!r} is not a log file name")
        return os.path.join(self.path, name)

    def tail(self, name: str, lines: int) -> dict[str, Any]:
        path = self._path(name)
        lines = max(1, min(lines, 100_000))
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            # Read backwards in blocks until enough newlines are seen (a huge file costs little).
            block, data, pos = 64 * 1024, b"", size
            while pos > 0 and data.count(b"\n") <= lines:
                step = min(block, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
        text = data.decode("utf-8", "replace").splitlines()
        return {"name": name, "lines": text[-lines:], "size": size}

    def read(self, name: str, offset: int, size: int) -> dict[str, Any]:
        try:
            path = self._path(name)
            with open(path, "rb") as f:
                end = f.seek(0, os.SEEK_END)
                truncated = offset > end
                if truncated:
                    offset = 0  # rotated or truncated under the reader: start again
                f.seek(offset)
                data = f.read(max(0, min(size, MAX_CHUNK)))
        except FileNotFoundError:
            return {
                "name": name,
                "data": "",
                "next_offset": offset,
                "eof": True,
                "error": f"log file {name} no longer exists on this node",
            }
        nxt = offset + len(data)
        return {
            "name": name,
            "data": data.decode("utf-8", "replace"),
            "next_offset": nxt,
            "eof": nxt >= end,
            "truncated": truncated,
        }

    def search(self, pattern: str, name: str | None, max_matches: int) -> dict[str, Any]:
        names = [name] if name else sorted(f["name"] for f in self.index())
        matches: deque[dict[str, Any]] = deque()
        truncated = False
        for n in names:
            try:
                with open(self._path(n), errors="replace") as f:
                    for no, line in enumerate(f, 1):
                        if pattern in line:
                            if len(matches) >= max_matches:
                                truncated = True
                                break
                            matches.append({"name": n, "line_no": no, "line": line.rstrip("\n")})
            except OSError:
                continue
            if truncated:
                break
        return {"matches": list(matches), "truncated": truncated}


def describe(name: str) -> dict[str, Any]:
    """Component, pid and worker id from a file name."""
    m = _WORKER.match(name)
    if m:
        return {
            "name": name,
            "component": m.group(1),
            "worker_id": m.group(2),
            "pid": int(m.group(3)),
            "stream": m.group(4),
        }
    base, _, ext = name.rpartition(".")
    return {
        "name": name,
        "component": base or name,
        "worker_id": None,
        "pid": None,
        "stream": ext if base else "",
    }
