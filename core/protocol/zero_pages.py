"""Whole pages of zeros handed back to the kernel.

uvloop's event loop object carries its 256 KB receive buffer inline, and CPython zeroes every
new object's memory, so each process that makes a loop writes 62 pages of zeros it may never
read: a quarter of an idle actor's own memory (docs/benchmarks-memory.md). A page of a
private anonymous mapping given back with ``MADV_DONTNEED`` reads as zeros again and costs
nothing until it is next written, so handing back the pages that are wholly inside a new
object and hold nothing but zeros changes nothing the program can observe; the receive
buffer's first pages come back as reads fill them.

Only for an object no other thread can reach yet (between a check and the ``madvise`` a
write by another thread would be lost), and only the pages inside its own memory. Linux
only; elsewhere, or when ``madvise`` is unavailable, nothing is given back.
"""

from __future__ import annotations

import ctypes
import mmap
import sys

PAGE = mmap.PAGESIZE
_ZERO_PAGE = bytes(PAGE)
_madvise = None


def _madvise_fn():
    global _madvise
    if _madvise is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).madvise
        except (OSError, AttributeError):
            fn = False
        else:
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            fn.restype = ctypes.c_int
        _madvise = fn
    return _madvise


def release_zero_pages(address: int, size: int) -> int:
    """Gives back the pages wholly inside ``[address, address + size)`` that hold only
    zeros; returns how many bytes it gave back (0 where it cannot)."""
    madvise = _madvise_fn() if sys.platform == "linux" else False
    if not madvise or not hasattr(mmap, "MADV_DONTNEED"):
        return 0
    first = (address + PAGE - 1) & ~(PAGE - 1)
    end = (address + size) & ~(PAGE - 1)
    released = 0
    run_start = None
    for page in range(first, end + PAGE, PAGE):
        zero = page < end and ctypes.string_at(page, PAGE) == _ZERO_PAGE
        if zero and run_start is None:
            run_start = page
        elif not zero and run_start is not None:
            if madvise(run_start, page - run_start, mmap.MADV_DONTNEED) == 0:
                released += page - run_start
            run_start = None
    return released


def release_object_zero_pages(obj: object) -> int:
    """``release_zero_pages`` over a fixed-size object's own memory (its ``__basicsize__``
    bytes from its address; a variable-size object's items are left alone)."""
    cls = type(obj)
    if cls.__itemsize__:
        return 0
    return release_zero_pages(id(obj), cls.__basicsize__)
