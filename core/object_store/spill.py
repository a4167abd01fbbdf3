"""Spill files: objects' bytes on local disk while the shared-memory store is under pressure.

One raylet owns one directory, ``<root>/ember-spill-<node id>``, and one file per object in
it (``<object id>-<n>.spill``), so freeing an object removes its file at once and a directory
left by a killed raylet is recognisable by its name (``ember stop`` and the node's own
clean-up remove it). The bytes are copied between the arena mapping and the file by the
kernel (``write`` from, ``readinto`` to, a memoryview of the mapping), on the spiller's
threads: this module does the blocking I/O and never touches the event loop.

Space is bounded twice: by ``max_bytes`` (0: no fixed cap) counted over the files written
and being written, and by the file system's fullness (``disk_threshold``, Ray's
local_fs_capacity_threshold). Both refusals say what to change.
"""

from __future__ import annotations

import os
import shutil
import threading

SPILL_DIR_PREFIX = "ember-spill-"


class SpillSpaceError(OSError):
    """No room to spill: the configured cap or the disk itself is full."""


def spill_dir_for(root: str, node_id_hex: str) -> str:
    """The directory a node's raylet spills into under ``root``."""
    return os.path.join(root, SPILL_DIR_PREFIX + node_id_hex[:16])


class SpillFiles:
    """The spill directory of one raylet: reservations, writes, reads and removals."""

    def __init__(self, directory: str, max_bytes: int = 0, disk_threshold: float = 0.95) -> None:
        if max_bytes < 0:
            raise ValueError(f"object_spilling_max_bytes must not be negative, got {max_bytes}")
        if not 0 < disk_threshold <= 1:
            raise ValueError(f"disk threshold must be in (0, 1], got {disk_threshold}")
        self.directory = directory
        self.max_bytes = max_bytes
        self.disk_threshold = disk_threshold
        self._lock = threading.Lock()
        self._bytes = 0  # files written or reserved
        self._seq = 0
        self._created = False

    @property
    def bytes_used(self) -> int:
        return self._bytes

    def reserve(self, object_id: bytes, size: int) -> str:
        """Claims room for an object's file and returns its path; raises SpillSpaceError
        naming the limit when there is none."""
        with self._lock:
            if self.max_bytes and self._bytes + size > self.max_bytes:
                raise SpillSpaceError(
                    f"cannot spill object {object_id.hex()} of {size} bytes: the spill "
                    f"directory {self.directory} holds {self._bytes} bytes and its cap is "
                    f"{self.max_bytes} bytes (object_spilling_max_bytes). Raise the cap with "
                    f"`ember start --object-spilling-max-bytes N` or "
                    f"EMBER_OBJECT_SPILLING_MAX_BYTES=N (0 means no cap), or free objects."
                )
            self._bytes += size
            self._seq += 1
            # A sequence number too: an id written again (a retried task's result) must not
            # share a name with its old file, whose removal may still be queued.
            name = f"{object_id.hex()}-{self._seq}.spill"
        return os.path.join(self.directory, name)

    def unreserve(self, size: int) -> None:
        with self._lock:
            self._bytes = max(0, self._bytes - size)

    def _ensure_dir(self) -> None:
        if not self._created:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            self._created = True

    def check_disk(self, size: int) -> None:
        """Refuses a write that would fill the file system past ``disk_threshold``."""
        self._ensure_dir()
        usage = shutil.disk_usage(self.directory)
        if usage.total and (usage.used + size) / usage.total > self.disk_threshold:
            raise SpillSpaceError(
                f"cannot spill {size} bytes to {self.directory}: its file system would be "
                f"more than {self.disk_threshold:.0%} full ({usage.used} of {usage.total} "
                f"bytes used). Free disk space, or spill elsewhere with `ember start "
                f"--object-spilling-directory DIR` or EMBER_OBJECT_SPILLING_DIRECTORY=DIR."
            )

    def write(self, path: str, data: memoryview) -> None:
        """Writes one object's bytes to its own new file (blocking: run it on a thread)."""
        self._ensure_dir()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            done, n = 0, len(data)
            while done < n:
                done += os.write(fd, data[done:])
        except BaseException:
            os.close(fd)
            _unlink(path)
            raise
        os.close(fd)

    def read_into(self, path: str, view: memoryview) -> None:
        """Reads a spilled object back into ``view`` (blocking: run it on a thread)."""
        with open(path, "rb", buffering=0) as f:
            got, n = 0, len(view)
            while got < n:
                k = f.readinto(view[got:])
                if not k:
                    raise OSError(f"spill file {path} ended after {got} of {n} bytes")
                got += k

    def remove(self, path: str, size: int) -> None:
        """Deletes an object's file and gives its room back."""
        _unlink(path)
        self.unreserve(size)

    def remove_all(self) -> None:
        """Deletes the whole directory (the raylet is stopping: nothing in it can be read)."""
        shutil.rmtree(self.directory, ignore_errors=True)
        with self._lock:
            self._bytes = 0
            self._created = False


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
