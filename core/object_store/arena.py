"""Client access to the node's shared-memory arena file.

The raylet creates one sparse file in /dev/shm per node; every driver and worker maps the
whole file once and copies objects in and out at the offsets the raylet hands out. Because
freed space is reused, its pages stay resident in every mapping and writes into it run at
memcpy speed instead of paying a page fault per 4 KiB.

Readers get zero-copy, read-only views. The raylet must not reuse an object's memory while
any such view (or a numpy array built on one) is alive, so ``Arena.view`` reports, through a
callback, the moment the last of them has been garbage collected.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import pickle
import threading
import weakref
from collections.abc import Callable, Sequence

from ember import memcopy

Chunk = bytes | bytearray | memoryview | pickle.PickleBuffer


def create_arena_file(path: str, capacity: int) -> None:
    """Creates the arena file, owner-only and sparse: pages are allocated as they are written."""
    if capacity <= 0:
        raise ValueError(f"arena capacity must be positive, got {capacity}")
    # O_EXCL: two raylets (or a stale file from a crashed one) must never share an arena.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        # The umask can only narrow the mode, but be explicit about what other users may do.
        os.fchmod(fd, 0o600)
        os.ftruncate(fd, capacity)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def hold_arena_file(path: str) -> int:
    """A shared lock on the arena file, held through the returned descriptor for as long as
    it stays open: the raylet holds it for its life, and a node starting takes a file no one
    holds, whose maker is gone, to be a killed node's (``remove_if_unheld``)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_if_unheld(path: str) -> bool:
    """Removes an arena file no process holds (``hold_arena_file``); True if it did. The
    lock is a file's, so it sees holders in other PID namespaces too (containers sharing
    /dev/shm), which a process listing would not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: a running node's
        os.close(fd)
        return False
    try:
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_arena_file(path: str) -> None:
    """Removes the arena file; mappings that still exist stay valid until they are unmapped."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def layout(sizes: Sequence[int], pad_to: int = 1) -> tuple[list[int], int]:
    """Where ``Arena.write`` puts chunks of these sizes: (start of each, total span).

    Starts are relative to the write's offset, which the allocator keeps aligned, so a reader
    can find each out-of-band buffer from the sizes alone.
    """
    if pad_to <= 0:
        raise ValueError(f"pad_to must be positive, got {pad_to}")
    starts = []
    pos = 0
    for size in sizes:
        pos = -(-pos // pad_to) * pad_to
        starts.append(pos)
        pos += size
    return starts, pos


def _flat(chunk: Chunk) -> memoryview:
    # PickleBuffer.raw() gives a flat byte view of any contiguous buffer, C or Fortran order,
    # without copying; only a non-contiguous buffer has to be packed first.
    try:
        return pickle.PickleBuffer(chunk).raw()
    except BufferError:
        return memoryview(memoryview(chunk).tobytes())


# Large memcpy calls use glibc's non-temporal path, which runs at ~15 GB/s but drops to
# ~4 GB/s when the destination's page offset is up to ~1 KiB past the source's: loads then
# falsely depend on in-flight stores with the same low 12 address bits ("4K aliasing"). In
# that case we copy in blocks small enough for glibc to use ordinary stores, ~8-9 GB/s
# whatever the alignment. Measured on AMD EPYC, glibc 2.36; see benchmarks/arena_write.py.
# Writers that start large buffers page aligned (pad_to=4096) keep the fast path for buffers
# allocated by malloc, whose data sits 16 bytes into a page.
_LARGE_COPY = 4 << 20
_COPY_BLOCK = 256 << 10
_PAGE = 4096
_ALIASING_WINDOW = 1024


def _copy(mm: mmap.mmap, pos: int, flat: memoryview) -> None:
    n = flat.nbytes
    if n >= _LARGE_COPY:
        src = memcopy.address_of(flat)
        # The mapping is page aligned, so the destination's page offset is pos's.
        if src is None or 0 < (pos - src) % _PAGE < _ALIASING_WINDOW:
            for i in range(0, n, _COPY_BLOCK):
                end = min(n, i + _COPY_BLOCK)
                mm[pos + i : pos + end] = flat[i:end]
            return
        if n >= memcopy.PARALLEL_COPY:
            with memoryview(mm) as whole:
                memcopy.copy(whole[pos : pos + n], flat.cast("B") if flat.format != "B" else flat)
            return
    # Slice assignment into an mmap is a single memcpy.
    mm[pos : pos + n] = flat


class Arena:
    """One process's mapping of the node's arena file."""

    def __init__(self, path: str, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"arena capacity must be positive, got {capacity}")
        self._path = path
        self._capacity = capacity
        self._mm: mmap.mmap | None = None
        self._closed = False
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        return self._path

    @property
    def capacity(self) -> int:
        return self._capacity

    def _map(self) -> mmap.mmap:
        mm = self._mm
        if mm is not None:
            return mm
        with self._lock:
            if self._closed:
                raise ValueError(f"arena {self._path} is closed")
            if self._mm is None:
                fd = os.open(self._path, os.O_RDWR)
                try:
                    self._mm = mmap.mmap(
                        fd, self._capacity, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
                    )
                finally:
                    # The mapping holds its own reference to the file.
                    os.close(fd)
            return self._mm

    def _check_range(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self._capacity:
            raise ValueError(
                f"range [{offset}, {offset + size}) is outside the arena of {self._capacity} bytes"
            )

    def write(
        self,
        offset: int,
        chunks: Sequence[Chunk],
        *,
        pad_to: int = 1,
        limit: int | None = None,
    ) -> int:
        """Copies the chunks back to back from ``offset``; returns the span written.

        Each chunk starts at the next multiple of ``pad_to`` (relative to ``offset``) so that,
        for example, numpy buffers land 64-byte aligned. Padding bytes are left as they were.
        ``limit``, if given, is the size of the reserved block: writing past it raises before
        anything is copied, so a bad size can never corrupt a neighbouring object.
        """
        flats = [_flat(c) for c in chunks]
        starts, span = layout([f.nbytes for f in flats], pad_to)
        if limit is not None and span > limit:
            raise ValueError(f"{span} bytes do not fit in the {limit} bytes reserved at {offset}")
        self._check_range(offset, span)
        mm = self._map()
        for start, flat in zip(starts, flats, strict=True):
            _copy(mm, offset + start, flat)
        return span

    def view(
        self, offset: int, size: int, on_release: Callable[[], None] | None = None
    ) -> memoryview:
        """A zero-copy, read-only view of ``size`` bytes at ``offset``.

        ``on_release`` runs once, after the view and everything built on it (slices, numpy
        arrays, unpickled out-of-band buffers) have been garbage collected; that is when the
        raylet may reuse the memory.
        """
        self._check_range(offset, size)
        mm = self._map()
        # A fresh ctypes object per view is the exporter every derived buffer keeps alive, and
        # unlike a memoryview it can be weakly referenced. It spans the whole arena so that a
        # single array type is ever built: ctypes caches one type per distinct length forever.
        anchor = _whole_arena_type(self._capacity).from_buffer(mm)
        if on_release is not None:
            # Not at interpreter exit: a dying process's pins are dropped by the raylet when
            # its connection closes, and the callback's transport may already be gone.
            weakref.finalize(anchor, on_release).atexit = False
        return memoryview(anchor).cast("B")[offset : offset + size].toreadonly()

    def writable_view(self, offset: int, size: int) -> memoryview:
        """A zero-copy, writable view for serialising straight into the arena."""
        self._check_range(offset, size)
        return memoryview(self._map())[offset : offset + size]

    def close(self) -> None:
        """Unmaps the arena unless views are outstanding, in which case the GC unmaps it later.

        A process may legitimately keep arrays built on arena views past shutdown; unmapping
        under them would turn every later access into a segfault.
        """
        with self._lock:
            self._closed = True
            mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                # Views still export the mapping; they hold references to it and it is
                # unmapped when the last of them is collected.
                pass

    def __enter__(self) -> Arena:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("mapped" if self._mm is not None else "unmapped")
        return f"Arena({self._path!r}, capacity={self._capacity}, {state})"


_array_types: dict[int, type[ctypes.Array[ctypes.c_char]]] = {}


def _whole_arena_type(capacity: int) -> type[ctypes.Array[ctypes.c_char]]:
    cls = _array_types.get(capacity)
    if cls is None:
        cls = _array_types[capacity] = ctypes.c_char * capacity
    return cls
