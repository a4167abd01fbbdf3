"""The fork server's heap, prepared so that its children copy as few of its pages as they can.

A forked worker shares every page of the zygote until it writes to one; then the kernel
copies that page (4 KiB) for it alone. CPython writes wherever it allocates: pymalloc hands
out the free blocks of partly used pools first, and after the zygote's imports freed their
temporaries those free blocks lie scattered through hundreds of shared pools, so a child's
first few thousand small objects landed on as many shared pages and copied each of them.
``fill_free_blocks`` takes every free block of every partly used pool before the first
fork, with objects the zygote keeps and no child ever touches: a child's objects then go
to pools of its own, packed. ``fill_malloc_chunks`` does the same for glibc malloc's small
free chunks (objects over 512 bytes, and C libraries' own allocations), which a child's
small C allocations reused one shared page each. The fillers cost the node their size once
(shared by all its workers), a few hundred kilobytes; they cut ~0.35 MiB from every idle
actor together (docs/benchmarks-memory.md).
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import tempfile

# Objects of exactly each pymalloc size class (multiples of 16 up to 512 on 64-bit
# CPython 3.11), none tracked by the collector and none cached by the interpreter.
_BYTES_HEADER = sys.getsizeof(b"")  # a bytes object of n bytes takes this + n
_SMALLEST_BYTES = _BYTES_HEADER + 2  # lengths 0 and 1 are shared singletons


def _filler(size: int, i: int) -> object:
    if size <= 16:
        return object()
    if size <= 32:
        return i + (1 << 20)  # a one-digit int: 28 bytes, not one of the cached small ints
    return bytes(max(size - _BYTES_HEADER, _SMALLEST_BYTES - _BYTES_HEADER))


def free_blocks() -> dict[int, int]:
    """{size class in bytes: free blocks in its partly used pools}, from the allocator's
    own statistics (``sys._debugmallocstats``, which writes them to file descriptor 2);
    {} where that is not there (another interpreter, ``PYTHONMALLOC=malloc``, no stderr)."""
    dump = getattr(sys, "_debugmallocstats", None)
    if dump is None:
        return {}
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no stderr to borrow: fill nothing
        return {}
    with tempfile.TemporaryFile() as out:
        try:
            os.dup2(out.fileno(), 2)
            dump()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    avail: dict[int, int] = {}
    in_table = False
    for line in text.splitlines():
        fields = line.split()
        if fields[:2] == ["class", "size"]:
            in_table = True
        elif in_table and len(fields) == 5 and all(f.isdigit() for f in fields):
            avail[int(fields[1])] = int(fields[4])
        elif in_table and not fields:
            break
    return avail


def fill_free_blocks(limit: int = 200_000) -> list[object]:
    """Takes the free blocks of pymalloc's partly used pools (at most ``limit`` in all);
    returns the fillers, to keep for as long as processes fork from here."""
    avail = free_blocks()
    keep: list[object] = [None] * min(sum(avail.values()), limit)
    n = 0
    for size, free in sorted(avail.items()):
        for _ in range(min(free, limit - n)):
            keep[n] = _filler(size, n)
            n += 1
    return keep


_TCACHE_COUNT = 7  # glibc's per-thread cache holds up to 7 freed chunks of each small size
_MALLOC_SIZES = re.compile(r'<size from="(\d+)" to="(\d+)" total="\d+" count="(\d+)"/>')


def malloc_free_chunks(largest: int = 4096) -> dict[int, int]:
    """{chunk size: free chunks} of glibc's main heap up to ``largest`` bytes, from its own
    report (``malloc_info``); {} elsewhere (another C library, no libc to load)."""
    try:
        libc = ctypes.CDLL(None)
        info, fdopen, fclose = libc.malloc_info, libc.fdopen, libc.fclose
    except (OSError, AttributeError):
        return {}
    fdopen.restype = ctypes.c_void_p
    with tempfile.TemporaryFile() as out:
        stream = fdopen(os.dup(out.fileno()), b"w")
        if not stream:
            return {}
        info(0, ctypes.c_void_p(stream))
        fclose(ctypes.c_void_p(stream))
        out.seek(0)
        text = out.read().decode(errors="replace")
    main_heap = text.split('<heap nr="1">')[0]  # other threads' arenas are not shared
    chunks: dict[int, int] = {}
    for lo, hi, count in _MALLOC_SIZES.findall(main_heap):
        if lo == hi and int(lo) - 1 <= largest:
            chunks[int(lo) - 1] = int(count)  # reported as the chunk's size + 1
    return chunks


def fill_malloc_chunks(largest: int = 4096) -> list[int]:
    """Takes glibc's small free chunks (and its thread cache's) with blocks never freed;
    returns their addresses. A child's small C allocations then come from fresh memory
    instead of one shared page each."""
    chunks = malloc_free_chunks(largest)
    if not chunks:
        return []
    malloc = ctypes.CDLL(None).malloc
    malloc.restype = ctypes.c_void_p
    taken: list[int] = []
    for size, count in chunks.items():
        for _ in range(count + _TCACHE_COUNT):
            taken.append(malloc(max(size - 8, 1)))  # a request this size gets that chunk
    return taken
