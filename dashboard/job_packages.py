"""Packages uploaded for jobs (``PUT /api/packages/{protocol}/{name}``): the zip files Ray's
Jobs client uploads for a ``working_dir`` before it submits, named ``_ray_pkg_<hash>.zip``
(the name is the content's hash, so a package already there is not sent again). They are
kept under the head's session dir, ``runtime_resources/packages/<protocol>/<name>``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

from ember.runtime_env_packages import PackageError, package_file

# Ray's own limit for a package in its GCS (``GCS_STORAGE_MAX_SIZE``, 500 MiB).
MAX_BYTES = int(os.environ.get("EMBER_JOB_PACKAGE_MAX_BYTES", str(500 * 1024 * 1024)))


def path_of(session_dir: str, protocol: str, name: str) -> str:
    """The package's file; PackageError for a protocol or name that could leave the dir."""
    return package_file(session_dir, protocol, name)


def parse_uri(uri: str) -> tuple[str, str]:
    """``gcs://_ray_pkg_<hash>.zip`` -> ``("gcs", name)``."""
    protocol, sep, name = uri.partition("://")
    if not sep:
        raise PackageError(400, f"working_dir must be a package URI (gcs://...), not {uri!r}")
    return protocol, name


def too_big(size: int) -> PackageError:
    return PackageError(
        413,
        f"the package is {size / 2**20:.1f} MiB, over the limit of {MAX_BYTES / 2**20:.0f} MiB "
        "(EMBER_JOB_PACKAGE_MAX_BYTES on the head). Make it smaller: leave large files out of "
        "working_dir with runtime_env={'excludes': [...]}, or read data from shared storage "
        "instead of shipping it with the job.",
    )


async def store(path: str, chunks: AsyncIterator[bytes], declared: int | None) -> int:
    """Writes the upload to ``path`` (atomically), refusing it past ``MAX_BYTES``."""
    if declared is not None and declared > MAX_BYTES:
        raise too_big(declared)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.part{os.getpid()}"
    size = 0
    try:
        with open(tmp, "wb") as f:
            async for chunk in chunks:
                size += len(chunk)
                if size > MAX_BYTES:
                    raise too_big(size)
                f.write(chunk)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return size


def uploaded(session_dir: str, uri: str, field: str = "working_dir") -> str:
    """The name of the package ``uri`` names, which must have been uploaded."""
    protocol, name = parse_uri(uri)
    if not os.path.exists(path_of(session_dir, protocol, name)):
        raise PackageError(400, f"{field} package {uri} was not uploaded to this cluster")
    return name
