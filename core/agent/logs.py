"""The node's log files: an index by component and worker, and bounded reads.

Names come from the session's ``logs/`` directory (``worker-<id>-<pid>.err``,
``raylet.log``, ...). Every read names a file of that directory, never a path, and opens it
through ``ember.log_files.open_log``, which refuses links (symbolic or hard) and anything
but a regular file, so nothing outside ``logs/`` can be read even when a job places a link
there; the index lists only what it would serve. Reads are bounded (a tail of at most 100,000 lines,
chunks of at most 4 MB, a search stops at ``max_matches``).

Rotation. A rotated file (``raylet.log.1``, ``worker-<id>-<pid>.err.1``,
``raylet.log.2024-05-01``, ``raylet.log.2024-05-01_10-00-00``) is indexed under the same
component, worker and pid as the live file, with ``rotated`` set to its suffix. A follower
reads with the identity of the file it was reading (``file_id``: device and inode) and a
``mark`` (the bytes just before its offset), so ``read`` tells every kind of rotation apart:

- renamed away (``logrotate``, ``RotatingFileHandler``): the live name is another inode; the
  rest of the old inode is read first (found by its inode under its new name), then the new
  file from its start, so no line is lost even when the new file already grew past the
  follower's offset;
- truncated in place (``copytruncate``): the same inode, but shorter than the offset or with
  other bytes before it; read again from the start.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
from collections import deque
from typing import Any

from ember.log_files import REFUSED_STATUS, LogFileRefused, check_name, is_servable, open_log
from ember.log_format import readable

_WORKER = re.compile(r"^(worker|driver)-([0-9a-f]+)-(\d+)\.(out|err|log)$")
# What rotation appends to a name: a number (.1), or a date with an optional time
# (.2024-05-01, .20240501, -20240501, .2024-05-01_10-00-00), as logrotate and Python's
# rotating handlers write them.
_ROTATED = re.compile(
    r"^(?P<live>.+?)(?P<suffix>\.\d{1,4}|[.-]\d{4}-?\d{2}-?\d{2}(?:[_T.-]?\d{2}(?:[-:.]?\d{2}){0,2})?)$"
)
MAX_CHUNK = 4 * 1024 * 1024
MARK_BYTES = 32  # how much of the text before a follower's offset identifies it


class LogDir:
    def __init__(self, path: str) -> None:
        self.path = path

    async def serve(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        """A log request (``log_tail``, ``log_read``, ``log_search``), in a thread (LogDir
        holds no state): a search through large files must not stall the loop, which on the
        head is the dashboard's. A file the logs directory holds but Ember will not serve (a
        link: ``ember.log_files``) is an error with the HTTP status to answer, never its
        contents."""
        name = body.get("name")
        try:
            if op == "log_tail":
                return await asyncio.to_thread(self.tail, name, int(body.get("lines", 100)))
            if op == "log_read":
                return await asyncio.to_thread(
                    self.read,
                    name,
                    int(body.get("offset", 0)),
                    int(body.get("size", 0)),
                    body.get("file_id"),
                    body.get("mark"),
                )
            return await asyncio.to_thread(
                self.search, body["pattern"], name, int(body.get("max_matches", 500))
            )
        except LogFileRefused as e:
            return {"name": name, "error": str(e), "status": REFUSED_STATUS, "eof": True}
        except FileNotFoundError:  # indexed a moment ago, deleted since
            return {"name": name, "error": f"log file {name} no longer exists on this node"}

    def index(self) -> list[dict[str, Any]]:
        try:
            entries = list(os.scandir(self.path))
        except OSError:
            return []
        files = []
        for e in entries:
            try:
                if not is_servable(e):
                    continue
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue  # deleted between listing and stat
            files.append({**describe(e.name), "size": st.st_size, "mtime": st.st_mtime})
        return files

    def _open(self, name: str) -> Any:
        return open_log(self.path, name)

    def _read_at(
        self, name: str, offset: int, size: int, mark: str | None = None
    ) -> dict[str, Any]:
        return _read_from(self._open(name), offset, size, mark)

    def _stat(self, name: str) -> os.stat_result:
        """The file's identity, not following a link (``open_log`` refuses links when read)."""
        check_name(name)
        return os.lstat(os.path.join(self.path, name))

    def tail(self, name: str, lines: int) -> dict[str, Any]:
        lines = max(1, min(lines, 100_000))
        with self._open(name) as f:
            size = f.seek(0, os.SEEK_END)
            # Read backwards in blocks until enough newlines are seen (a huge file costs little).
            block, data, pos = 64 * 1024, b"", size
            while pos > 0 and data.count(b"\n") <= lines:
                step = min(block, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
            file_id = _file_id(os.fstat(f.fileno()))
        text = data.decode("utf-8", "replace").splitlines()
        return {
            "name": name,
            "lines": text[-lines:],
            "size": size,
            "file_id": file_id,
            "mark": data[-MARK_BYTES:].hex(),
        }

    def read(
        self,
        name: str,
        offset: int,
        size: int,
        file_id: str | None = None,
        mark: str | None = None,
    ) -> dict[str, Any]:
        """Up to ``size`` bytes of ``name`` from ``offset``. A follower passes back the
        ``file_id`` and ``mark`` of its previous read; ``rotated`` then says whether the file
        was ``renamed`` or ``truncated`` since (see the module doc)."""
        size = max(0, min(size, MAX_CHUNK))
        try:
            cur = _file_id(self._stat(name))
        except FileNotFoundError:
            cur = None
        if file_id and cur != file_id:
            # Renamed away (or deleted): the old inode may hold lines not read yet.
            old = self._find(file_id)
            if old is not None:
                res = self._read_at(old, offset, size, mark)
                if not res["shrunk"] and res["data"]:
                    # Not at the end yet, as far as the follower is concerned: the new file
                    # waits behind this one.
                    return {**_answer(name, res, None), "from_file": old, "eof": False}
            if cur is None:
                return _gone(name, offset)
            offset, mark, rotated = 0, None, "renamed"  # the old one is done: the new one
        elif cur is None:
            return _gone(name, offset)
        else:
            rotated = None
        try:
            res = self._read_at(name, offset, size, mark)
            if res["shrunk"]:
                rotated = rotated or "truncated"
                res = self._read_at(name, 0, size)
        except FileNotFoundError:
            return _gone(name, offset)
        return _answer(name, res, rotated)

    def _find(self, file_id: str) -> str | None:
        """The name a file with this identity has now (after a rename), if still here."""
        try:
            entries = list(os.scandir(self.path))
        except OSError:
            return None
        for e in entries:
            try:
                if is_servable(e) and _file_id(e.stat(follow_symlinks=False)) == file_id:
                    return e.name
            except OSError:
                continue
        return None

    def search(self, pattern: str, name: str | None, max_matches: int) -> dict[str, Any]:
        names = [name] if name else sorted(f["name"] for f in self.index())
        matches: deque[dict[str, Any]] = deque()
        truncated = False
        for n in names:
            try:
                with io.TextIOWrapper(self._open(n), errors="replace") as f:
                    for no, line in enumerate(f, 1):
                        # A JSON log line matches on its text too: a message's quotes or
                        # non-ASCII are escaped in the JSON, not in what the reader sees.
                        if pattern in line or (line[:1] == "{" and pattern in readable(line)):
                            if len(matches) >= max_matches:
                                truncated = True
                                break
                            matches.append({"name": n, "line_no": no, "line": line.rstrip("\n")})
            except LogFileRefused:
                if name:  # asked for by name: say why, as a read would
                    raise
                continue  # listed a moment ago, replaced by a link since
            except OSError:
                continue
            if truncated:
                break
        return {"matches": list(matches), "truncated": truncated}


def _file_id(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}"


def _read_from(f: Any, offset: int, size: int, mark: str | None = None) -> dict[str, Any]:
    """Reads the open file ``f`` from ``offset``; ``shrunk`` when the file is shorter than
    ``offset`` or the bytes before it are not ``mark`` (truncated, then written again)."""
    with f:
        end = f.seek(0, os.SEEK_END)
        shrunk = offset > end
        if not shrunk and mark:
            want = bytes.fromhex(mark)
            f.seek(max(offset - len(want), 0))
            shrunk = f.read(len(want)) != want
        if shrunk:
            return {"shrunk": True}
        f.seek(offset)
        data = f.read(size)
        nxt = offset + len(data)
        before = data[-MARK_BYTES:]
        if len(before) < MARK_BYTES and nxt > len(before):
            f.seek(max(nxt - MARK_BYTES, 0))
            before = f.read(nxt - max(nxt - MARK_BYTES, 0))
        ident = _file_id(os.fstat(f.fileno()))
    return {
        "shrunk": False,
        "data": data.decode("utf-8", "replace"),
        "next_offset": nxt,
        "eof": nxt >= end,
        "size": end,
        "mark": before.hex(),
        "id": ident,
    }


def _answer(name: str, res: dict[str, Any], rotated: str | None) -> dict[str, Any]:
    return {
        "name": name,
        "data": res["data"],
        "next_offset": res["next_offset"],
        "eof": res["eof"],
        "size": res["size"],  # the file's, at this read: where a reader of its end starts
        "file_id": res["id"],
        "mark": res["mark"],
        "rotated": rotated,
        "truncated": rotated is not None,  # the field older followers read
    }


def _gone(name: str, offset: int) -> dict[str, Any]:
    return {
        "name": name,
        "data": "",
        "next_offset": offset,
        "eof": True,
        "error": f"log file {name} no longer exists on this node",
    }


def describe(name: str) -> dict[str, Any]:
    """Component, pid and worker id from a file name; a rotated file is described as its
    live file, with ``rotated`` set to the suffix rotation added."""
    rotated = None
    m = _ROTATED.match(name)
    if m and (_WORKER.match(m.group("live")) or "." in m.group("live")):
        rotated = m.group("suffix").lstrip(".-")
        live = m.group("live")
    else:
        live = name
    m = _WORKER.match(live)
    if m:
        return {
            "name": name,
            "component": m.group(1),
            "worker_id": m.group(2),
            "pid": int(m.group(3)),
            "stream": m.group(4),
            "rotated": rotated,
        }
    base, _, ext = live.rpartition(".")
    return {
        "name": name,
        "component": base or live,
        "worker_id": None,
        "pid": None,
        "stream": ext if base else "",
        "rotated": rotated,
    }
