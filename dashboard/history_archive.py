"""A session's history in one file, ``ember archive``, and that file opened again by the
history server (``ember dashboard --history FILE.tar.gz``).

An archive is a gzipped tar of one directory named like the session, holding only what the
history server reads: ``history/`` (the journal), ``logs/`` (the head's logs),
``node_logs/`` (the other nodes' logs shipped to the head), a consistent copy of the GCS's
SQLite file, and ``ember-archive.json`` (what was packed, when, and whether the cluster was
still running). Never sockets, the shared-memory arena (in /dev/shm, not the session),
spill directories, tokens or pid files: an allowlist, not a denylist, so whatever a later
version adds to the session directory stays out until it is named here.

Packing a running session takes what is on disk at that moment: each file up to the size
it had when it was opened (so a log being written ends at a line the writer had flushed),
the journal's open segment cut at its last whole record, and the SQLite file through
SQLite's backup API (a consistent snapshot including its write-ahead log). The manifest says
``"running": true``. Links are never followed: an entry of the session directory that is a
link (to anywhere) is left out and listed as skipped.

Opening an archive extracts it into a private temporary directory (the caller removes it),
refusing, with the member's name and why, absolute paths, ``..``, links, devices and
anything else that is not a plain file or directory; the bytes written are bounded by
``EMBER_HISTORY_ARCHIVE_MAX_BYTES`` (4 GiB) in all, whatever the headers claim.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import stat
import struct
import tarfile
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ember.dashboard.history_format import HISTORY_DIR, SEGMENT
from ember.gcs.storage import SQLITE_FILE  # the GCS's embedded store

PACKED_DIRS = ("history", "logs", "node_logs")
MANIFEST = "ember-archive.json"
SUFFIXES = (".tar.gz", ".tgz")
MAX_BYTES_ENV = "EMBER_HISTORY_ARCHIVE_MAX_BYTES"
DEFAULT_MAX_BYTES = 4 << 30
MAX_MEMBERS = 200_000  # inodes, and the member list tarfile keeps
_LEN = struct.Struct("<I")


class ArchiveError(ValueError):
    """Bad input to ``pack`` or a refused archive; the message names what and how to fix."""


@dataclass
class Packed:
    """What ``pack`` wrote."""

    path: str
    session_dir: str
    running: bool
    files: int = 0
    bytes: int = 0  # before compression
    archive_bytes: int = 0
    skipped: list[str] = field(default_factory=list)  # "<path>: why"


def is_archive(path: str) -> bool:
    return path.endswith(SUFFIXES) and os.path.isfile(path)


def is_session_dir(path: str) -> bool:
    """A session directory as ``ember start``/``init()`` make them: the head's has a
    history or the GCS's file, every node's has ``logs/``."""
    return any(os.path.lexists(os.path.join(path, name)) for name in (*PACKED_DIRS, SQLITE_FILE))


# -- packing ---------------------------------------------------------------------------------
def pack(session_dir: str, out: str, running: bool) -> Packed:
    """Packs ``session_dir`` into a new file ``out`` (never overwritten); ``running`` says
    the cluster still runs (the manifest says so). ArchiveError on bad input."""
    given = session_dir
    session_dir = os.path.realpath(os.path.expanduser(session_dir))
    if not os.path.isdir(session_dir):
        raise ArchiveError(
            f"{given} is not a directory: give a session directory "
            "(<temp dir>/session_<time>_<pid>), or none for the newest one"
        )
    if not is_session_dir(session_dir):
        raise ArchiveError(
            f"{given} is not an Ember session directory: it has none of "
            f"{', '.join(PACKED_DIRS)}, {SQLITE_FILE} (give <temp dir>/session_<time>_<pid>)"
        )
    out = os.path.abspath(os.path.expanduser(out))
    if not out.endswith(SUFFIXES):
        raise ArchiveError(f"-o {out}: the archive's name must end in .tar.gz (or .tgz)")
    if os.path.lexists(out):
        raise ArchiveError(f"{out} exists: give a new file name (it is never overwritten)")
    if not os.path.isdir(os.path.dirname(out)):
        raise ArchiveError(f"-o {out}: the directory {os.path.dirname(out)} does not exist")
    name = os.path.basename(session_dir)
    result = Packed(out, session_dir, running)
    partial = f"{out}.partial-{os.getpid()}"
    try:
        with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
            for rel in PACKED_DIRS:
                _pack_tree(tar, session_dir, rel, name, result, skip={partial, out})
            _pack_sqlite(tar, session_dir, name, result)
            manifest = {
                "session_name": name,
                "session_dir": session_dir,
                "made_at": time.time(),
                "running": running,
                "files": result.files,
                "bytes": result.bytes,
                "skipped": result.skipped,
            }
            data = json.dumps(manifest, indent=1).encode()
            _add(tar, f"{name}/{MANIFEST}", io.BytesIO(data), len(data), time.time())
        try:
            os.link(partial, out)  # no-clobber, unlike rename
        except FileExistsError:
            raise ArchiveError(f"{out} appeared while packing: give a new file name") from None
        result.archive_bytes = os.path.getsize(out)
    finally:
        if os.path.lexists(partial):
            os.unlink(partial)
    return result


def _pack_tree(
    tar: tarfile.TarFile, root: str, rel: str, name: str, result: Packed, skip: set[str]
) -> None:
    """Adds ``root/rel`` and what is under it, without following any link."""
    path = os.path.join(root, rel)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        result.skipped.append(f"{rel}: a link (links are not followed)")
    elif stat.S_ISDIR(st.st_mode):
        try:
            entries = sorted(os.listdir(path))
        except OSError as e:
            result.skipped.append(f"{rel}: {e.strerror}")
            return
        for entry in entries:
            _pack_tree(tar, root, os.path.join(rel, entry), name, result, skip)
    elif not stat.S_ISREG(st.st_mode):
        result.skipped.append(f"{rel}: not a regular file")
    elif path in skip or rel.endswith(".tmp"):
        return  # the archive itself, or a file its writer has not finished
    else:
        _pack_file(tar, path, f"{name}/{rel}", rel, result)


def _pack_file(tar: tarfile.TarFile, path: str, arcname: str, rel: str, result: Packed) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:  # removed meanwhile (retention, a compressed segment), or a link
        if not os.path.lexists(path):
            return
        result.skipped.append(f"{rel}: {e.strerror}")
        return
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        size = st.st_size
        base = os.path.basename(path)
        if rel.startswith(HISTORY_DIR + os.sep) and SEGMENT.match(base) and "gz" not in base:
            size = _whole_records(f, size)  # the segment being written: its whole records
        reader = _Exactly(f, size)
        _add(tar, arcname, reader, size, st.st_mtime)
        if reader.padded:
            result.skipped.append(f"{rel}: shrank while packed ({reader.padded} bytes zeroed)")
    result.files += 1
    result.bytes += size


def _whole_records(f: BinaryIO, size: int) -> int:
    """Where the last whole record of a plain journal segment ends, at most ``size``."""
    end = 0
    while end + _LEN.size <= size:
        f.seek(end)
        (n,) = _LEN.unpack(f.read(_LEN.size))
        if end + _LEN.size + n > size:
            break
        end += _LEN.size + n
    f.seek(0)
    return end


class _Exactly(io.RawIOBase):
    """Reads exactly ``size`` bytes of ``f``: a file that shrank meanwhile is padded with
    zeros (the tar header already said ``size``), and counted."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f, self.left, self.padded = f, size, 0

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.f.read(n)
        if len(data) < n:
            self.padded += n - len(data)
            data += bytes(n - len(data))
        self.left -= n
        return data


def _add(tar: tarfile.TarFile, arcname: str, f: Any, size: int, mtime: float) -> None:
    info = tarfile.TarInfo(arcname)
    info.size, info.mtime, info.mode = size, int(mtime), 0o644
    tar.addfile(info, f)


def _pack_sqlite(tar: tarfile.TarFile, session_dir: str, name: str, result: Packed) -> None:
    """A consistent copy of the GCS's SQLite file (with its write-ahead log), made through
    SQLite's backup API while the GCS may still be writing."""
    path = os.path.join(session_dir, SQLITE_FILE)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        result.skipped.append(f"{SQLITE_FILE}: not a regular file (links are not followed)")
        return
    # A stopped GCS left no write-ahead log: open it immutable, so that reading it creates
    # no -wal/-shm files in the session; with a log (running, or killed) read it through it.
    wal = os.path.exists(path + "-wal")
    uri = f"file:{path}?mode=ro" + ("" if wal else "&immutable=1")
    with tempfile.TemporaryDirectory(prefix="ember-archive-") as tmp:
        copy = os.path.join(tmp, SQLITE_FILE)
        try:
            src = sqlite3.connect(uri, uri=True)
            try:
                dst = sqlite3.connect(copy)
                try:
                    src.backup(dst)
                finally:
                    dst.close()
            finally:
                src.close()
        except sqlite3.Error as e:
            result.skipped.append(f"{SQLITE_FILE}: could not be read ({e})")
            return
        size = os.path.getsize(copy)
        with open(copy, "rb") as f:
            _add(tar, f"{name}/{SQLITE_FILE}", f, size, st.st_mtime)
    result.files += 1
    result.bytes += size


# -- opening ---------------------------------------------------------------------------------
class Budget:
    """The bytes and files extraction may still write, shared by every archive a server
    opens."""

    def __init__(self, max_bytes: int | None = None) -> None:
        if max_bytes is None:
            raw = os.environ.get(MAX_BYTES_ENV, str(DEFAULT_MAX_BYTES))
            try:
                max_bytes = int(raw)
            except ValueError:
                raise ArchiveError(f"{MAX_BYTES_ENV}={raw!r} is not a number of bytes") from None
        self.max_bytes = max_bytes
        self.written = 0
        self.members = 0

    def take(self, archive: str, n: int) -> None:
        self.written += n
        if self.written > self.max_bytes:
            raise ArchiveError(
                f"refusing {archive}: extracting it would write more than {self.max_bytes} "
                f"bytes (the limit for all archives opened; raise it with {MAX_BYTES_ENV})"
            )


def extract(archive: str, dest: str, budget: Budget) -> str:
    """Extracts ``archive`` into ``dest`` (a new, private directory) and returns the session
    directory it held. ArchiveError naming the member and why for anything unsafe."""
    top: str | None = None
    try:
        with tarfile.open(archive, "r|*") as tar:
            for member in tar:
                parts = _safe_parts(archive, member)
                if top is None:
                    top = parts[0]
                elif parts[0] != top:
                    raise ArchiveError(
                        f"refusing {archive}: it holds more than one session directory "
                        f"({top}, {parts[0]}); `ember archive` packs one"
                    )
                budget.members += 1
                if budget.members > MAX_MEMBERS:
                    raise ArchiveError(
                        f"refusing {archive}: more than {MAX_MEMBERS} files in the archives"
                    )
                _extract_member(archive, tar, member, os.path.join(dest, *parts), budget)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        raise ArchiveError(f"{archive} is not a readable .tar.gz archive: {e}") from None
    if top is None or not os.path.isdir(os.path.join(dest, top)):
        raise ArchiveError(f"{archive} holds no session directory (make one: ember archive)")
    return os.path.join(dest, top)


def _safe_parts(archive: str, member: tarfile.TarInfo) -> list[str]:
    name = member.name
    why = None
    if member.issym() or member.islnk():
        why = f"is a link (to {member.linkname!r})"
    elif member.isdev() or member.isfifo():
        why = "is a device or pipe"
    elif not (member.isreg() or member.isdir()):
        why = "is not a plain file or directory"
    elif name.startswith("/") or name.startswith("\\"):
        why = "has an absolute path"
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if why is None and ".." in parts:
        why = "has '..' in its path"
    if why is None and not parts:
        why = "has an empty name"
    if why is not None:
        raise ArchiveError(
            f"refusing {archive}: member {name!r} {why}; an archive made by `ember archive` "
            "holds only plain files and directories under one session directory"
        )
    return parts


def _extract_member(
    archive: str, tar: tarfile.TarFile, member: tarfile.TarInfo, target: str, budget: Budget
) -> None:
    """Writes one (already checked) member; what fails on this side (the disk, a member
    that clashes with another) names the member, apart from an archive that cannot be read."""
    src = tar.extractfile(member) if member.isreg() else None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        if member.isdir():
            os.makedirs(target, mode=0o700, exist_ok=True)
            return
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        fd = os.open(target, flags, 0o600)
    except FileExistsError:
        raise ArchiveError(f"refusing {archive}: member {member.name!r} appears twice") from None
    except OSError as e:
        raise ArchiveError(f"could not extract {member.name!r} of {archive}: {e}") from None
    with os.fdopen(fd, "wb") as out:
        while src is not None and (chunk := src.read(1 << 20)):
            budget.take(archive, len(chunk))
            try:
                out.write(chunk)
            except OSError as e:
                raise ArchiveError(f"could not extract {member.name!r} of {archive}: {e}") from None


def read_manifest(session_dir: str) -> dict[str, Any] | None:
    """The manifest of a session directory extracted from an archive (None for others)."""
    try:
        with open(os.path.join(session_dir, MANIFEST)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
