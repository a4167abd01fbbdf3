"""The history journal's format, shared by its writer and its reader.

A journal is a series of segment files ``<session_dir>/history/journal-<n>.records``; a
closed segment is compressed to ``journal-<n>.records.gz`` (gzip, level 1: ~12x smaller
for task events, at ~200 MB/s in the writer's thread). A record is a 4-byte little-endian
length and a pickle (protocol 5) of ``(time, kind, body)``, where body holds only
JSON-like values: dicts, lists, tuples, strings, bytes, numbers, booleans and None.

Why pickles and not JSON lines: the writer encodes on the dashboard's loop, and a batch of
task events costs pickle ~0.6 us an event against json's ~3.8 us (the dashboard itself takes
~6 us to ingest one); it keeps bytes and tuples as they were. Reading is safe: the reader's
unpickler refuses every class and function (``_DataOnly``), so a journal can hold nothing
but data. Why not SQLite: the reader never queries; it replays everything into the state the
routes already read; appending costs no transaction or index, and retention is deleting the
oldest file. A writer killed mid-record leaves one partial record at its end, which the
reader counts as skipped.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import re
import shutil
import struct
from collections.abc import Iterator
from typing import Any

HISTORY_DIR = "history"
SEGMENT = re.compile(r"^journal-(\d{6,})\.records(\.gz)?$")
_LEN = struct.Struct("<I")


def segment_path(history_dir: str, num: int) -> str:
    return os.path.join(history_dir, f"journal-{num:06d}.records")


def segments(history_dir: str) -> list[tuple[int, str]]:
    """``[(number, path)]`` of the journal's segments, oldest first (a segment found both
    plain and compressed, by a writer stopped mid-compression, is its plain file)."""
    try:
        names = os.listdir(history_dir)
    except OSError:
        return []
    found: dict[int, str] = {}
    for name in names:
        m = SEGMENT.match(name)
        if m and (int(m.group(1)) not in found or not m.group(2)):
            found[int(m.group(1))] = name
    return [(num, os.path.join(history_dir, found[num])) for num in sorted(found)]


def encode(t: float, kind: str, body: dict[str, Any]) -> bytes:
    data = pickle.dumps((t, kind, body), protocol=5)
    return _LEN.pack(len(data)) + data


def compress(path: str) -> str:
    """``path`` compressed beside it (then removed); returns the new path."""
    out = path + ".gz"
    tmp = out + ".tmp"
    with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(tmp, out)
    os.unlink(path)
    return out


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a history record may hold only data, not {module}.{name}")


def records(path: str) -> Iterator[tuple[float, str, dict[str, Any]] | None]:
    """The segment's records in order; None for one that cannot be read (a partial last
    record, or one holding more than data)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        while True:
            head = f.read(_LEN.size)
            if len(head) < _LEN.size:
                if head:
                    yield None
                return
            (n,) = _LEN.unpack(head)
            data = f.read(n)
            if len(data) < n:
                yield None
                return
            try:
                yield _DataOnly(io.BytesIO(data)).load()
            except (pickle.UnpicklingError, EOFError, ValueError, TypeError):
                yield None


def count(path: str) -> int:
    try:
        return sum(1 for _ in records(path))
    except OSError:
        return 0
