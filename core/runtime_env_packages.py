"""A job's ``working_dir`` and ``py_modules`` packages on every node that runs its code.

The head keeps each uploaded package once, by content (``_ray_pkg_<hash>.zip``, under its
session dir's ``runtime_resources/packages/gcs/``; the dashboard's ``PUT /api/packages``
writes it). A node that needs one (a job's entrypoint, or a worker running a task whose
driver imports from a package directory) unpacks it under its own session dir's
``runtime_resources/<kind>/<hash>``; a node other than the head first copies the zip from the
head through the GCS (``get_package_chunk``, a bounded chunk a call), since the GCS is the one
head service every node reaches (the dashboard may listen on the head's loopback only).

A driver's import directories travel with its tasks (``TaskSpec.code_path``) as the paths
they have on the driver's node; a worker elsewhere recognises a package directory by its
place in the session layout (``package_of``) and uses its own copy (``localize``).
"""

from __future__ import annotations

import fnmatch
import io
import os
import re
from collections.abc import Callable
from typing import Any

PROTOCOLS = frozenset({"gcs"})
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}$")
KINDS = ("working_dir_files", "py_modules_files")
CHUNK_BYTES = 4 * 1024 * 1024
# <session>/runtime_resources/<kind>/<stem>: an unpacked package, on whichever node.
_UNPACKED = re.compile(r"/runtime_resources/(working_dir_files|py_modules_files)/([^/]+)/?$")

# (name, offset) -> {"data": bytes, "size": total bytes}: one chunk of a head's package.
ReadChunk = Callable[[str, int], dict]


class PackageError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def package_file(session_dir: str, protocol: str, name: str) -> str:
    """The package's zip in ``session_dir``; PackageError for a protocol or name that could
    leave the directory."""
    if protocol not in PROTOCOLS:
        raise PackageError(
            400, f"unknown package protocol {protocol!r}; known: {sorted(PROTOCOLS)}"
        )
    if not NAME.match(name) or ".." in name:
        raise PackageError(
            400,
            f"bad package name {name!r}: letters, digits, '_', '-' and '.' only, "
            "not starting with '.'",
        )
    return os.path.join(session_dir, "runtime_resources", "packages", protocol, name)


def package_of(path: str) -> tuple[str, str] | None:
    """``(kind, zip name)`` when ``path`` is an unpacked package's directory, else None."""
    m = _UNPACKED.search(path)
    return (m.group(1), m.group(2) + ".zip") if m else None


def read_chunk(session_dir: str, name: str, offset: int) -> dict:
    """A chunk of the head's copy of package ``name`` (the GCS's ``get_package_chunk``).
    Opened without following links: the packages directory holds only what was uploaded."""
    path = package_file(session_dir, "gcs", name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise PackageError(404, f"package gcs://{name} is not on this cluster") from None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(offset)
        return {"data": f.read(CHUNK_BYTES), "size": size}


def unpack(session_dir: str, name: str, source: str | bytes, kind: str) -> str:
    """Package ``name`` (a zip file's path, or its bytes) unpacked under ``session_dir``,
    once per content; its directory. No member may land outside it."""
    import zipfile  # here: the GCS imports this module and never unpacks

    root = os.path.join(session_dir, "runtime_resources", kind)
    target = os.path.join(root, name.removesuffix(".zip"))
    if os.path.isdir(target):
        return target
    tmp = f"{target}.tmp{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)  # an empty directory's package has no member to make it
    opened = zipfile.ZipFile(io.BytesIO(source) if isinstance(source, bytes) else source)
    with opened as zf:
        real_tmp = os.path.realpath(tmp)
        for member in zf.namelist():
            dest = os.path.realpath(os.path.join(tmp, member))
            if not dest.startswith(real_tmp + os.sep):
                raise ValueError(f"package {name} has an unsafe path: {member!r}")
        zf.extractall(tmp)
    os.makedirs(root, exist_ok=True)
    try:
        os.rename(tmp, target)
    except OSError:  # another process unpacked the same package first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return target


def ensure(session_dir: str, kind: str, name: str, fetch: ReadChunk) -> str:
    """Package ``name`` unpacked on this node (``session_dir``: this node's session): from
    the zip here (the head's upload, or a copy made before), else copied from the head with
    ``fetch`` first."""
    target = os.path.join(session_dir, "runtime_resources", kind, name.removesuffix(".zip"))
    if os.path.isdir(target):
        return target
    local = package_file(session_dir, "gcs", name)
    if not os.path.exists(local):
        _copy_from_head(local, name, fetch)
    return unpack(session_dir, name, local, kind)


def _copy_from_head(local: str, name: str, fetch: ReadChunk) -> None:
    os.makedirs(os.path.dirname(local), exist_ok=True)
    tmp = f"{local}.part{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            offset, size = 0, None
            while size is None or offset < size:
                reply = fetch(name, offset)
                size, data = reply["size"], reply["data"]
                if not data and offset < size:
                    raise PackageError(500, f"package gcs://{name} ended early at {offset} bytes")
                f.write(data)
                offset += len(data)
        os.replace(tmp, local)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def fetch_through(call_gcs: Callable[[str, dict], dict]) -> ReadChunk:
    """A ``ReadChunk`` asking the head's GCS with ``call_gcs(op, body)``."""
    return lambda name, offset: call_gcs("get_package_chunk", {"name": name, "offset": offset})


def localize(path: str, session_dir: str, fetch: ReadChunk) -> str:
    """``path`` (a driver's import directory) as this node has it: a package directory of
    another node's session is this node's copy of that package (even where both sessions
    share a disk, as nodes on one machine do: a node never reads another's session, which
    goes when that node stops); any other path is itself."""
    found = package_of(path)
    if found is None or path.startswith(session_dir.rstrip(os.sep) + os.sep):
        return path
    kind, name = found
    return ensure(session_dir, kind, name, fetch)


# -- packing and uploading (the driver's side) ------------------------------------------------
MAX_PACKAGE_BYTES = 512 * 2**20


def package_name(data: bytes) -> str:
    """A package's name is its content's hash, as Ray names them (``_ray_pkg_<hash>.zip``)."""
    import hashlib

    return f"_ray_pkg_{hashlib.sha1(data).hexdigest()[:16]}.zip"


def zip_directory(path: str, excludes: list[str] = (), include_parent_dir: bool = False) -> bytes:
    """The directory's files as a zip, paths relative to it (under its own name with
    ``include_parent_dir``); ``excludes`` are glob patterns of relative paths (a pattern
    matching a directory leaves out what is in it). Raises ValueError past
    ``MAX_PACKAGE_BYTES``, naming the limit, the size and what to do."""
    root = os.path.abspath(os.path.expanduser(path))
    prefix = os.path.basename(root.rstrip(os.sep)) if include_parent_dir else ""
    if not os.path.isdir(root):
        raise ValueError(f"working_dir {path!r} is not a directory")
    import zipfile

    out = io.BytesIO()
    total = 0
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for folder, dirs, files in os.walk(root):
            rel_folder = os.path.relpath(folder, root)
            dirs[:] = sorted(
                d
                for d in dirs
                if not _excluded(os.path.normpath(os.path.join(rel_folder, d)), excludes)
            )
            for f in sorted(files):
                rel = os.path.normpath(os.path.join(rel_folder, f))
                full = os.path.join(folder, f)
                if _excluded(rel, excludes) or os.path.islink(full):
                    continue
                total += os.path.getsize(full)
                if total > MAX_PACKAGE_BYTES:
                    raise ValueError(
                        f"the package {path!r} is over {MAX_PACKAGE_BYTES // 2**20} MiB "
                        f"(at least {total // 2**20} MiB so far): leave large files out with "
                        "runtime_env 'excludes', or keep data outside working_dir"
                    )
                arcname = os.path.join(prefix, rel) if prefix else rel
                with open(full, "rb") as src:
                    z.writestr(_member(arcname, full), src.read())
    return out.getvalue()


def zip_file(path: str) -> bytes:
    """A one-file module (``py_modules=["helpers.py"]``) as a package: the file at its root,
    so the unpacked directory on the import path makes it importable."""
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z, open(path, "rb") as src:
        z.writestr(_member(os.path.basename(path), path), src.read())
    return out.getvalue()


def _member(arcname: str, full: str) -> Any:
    import zipfile

    # A fixed date: the same files give the same bytes, so the same name.
    info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = (os.stat(full).st_mode & 0o777) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _excluded(rel: str, patterns: list[str]) -> bool:
    name = os.path.basename(rel)
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns)


def upload(call_gcs: Callable[[str, dict], Any], data: bytes) -> str:
    """Puts a package on the head through its GCS, a chunk a call (nothing when the head
    has it already: the name is the content's hash); its ``gcs://`` URI."""
    name = package_name(data)
    for offset in range(0, max(len(data), 1), CHUNK_BYTES):
        chunk = data[offset : offset + CHUNK_BYTES]
        last = offset + len(chunk) >= len(data)
        reply = call_gcs(
            "put_package_chunk", {"name": name, "offset": offset, "data": chunk, "last": last}
        )
        if reply.get("exists"):
            break
    return f"gcs://{name}"


def write_chunk(session_dir: str, name: str, offset: int, data: bytes, last: bool) -> dict:
    """The GCS's side of ``upload``: appends to the package's partial file at ``offset``,
    which must be where it ends, and makes it the package with the last chunk."""
    path = package_file(session_dir, "gcs", name)
    if offset == 0 and os.path.exists(path):
        return {"exists": True}
    part = f"{path}.part"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if offset == 0:
        with open(part, "wb"):
            pass
    size = os.path.getsize(part) if os.path.exists(part) else -1
    if size != offset:
        raise PackageError(409, f"package {name}: chunk at {offset}, but {size} bytes are there")
    if offset + len(data) > MAX_PACKAGE_BYTES:
        os.unlink(part)
        raise PackageError(
            413,
            f"package {name} is over {MAX_PACKAGE_BYTES // 2**20} MiB: leave large files out "
            "with runtime_env 'excludes', or keep data outside working_dir",
        )
    with open(part, "ab") as f:
        f.write(data)
    if last:
        os.replace(part, path)
    return {"exists": False}
