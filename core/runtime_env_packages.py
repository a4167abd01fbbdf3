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

import os
import re
from collections.abc import Callable

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
    import io
    import zipfile  # here: the GCS imports this module and never unpacks

    root = os.path.join(session_dir, "runtime_resources", kind)
    target = os.path.join(root, name.removesuffix(".zip"))
    if os.path.isdir(target):
        return target
    tmp = f"{target}.tmp{os.getpid()}"
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
