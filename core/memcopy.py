"""Copies of large buffers at memory speed: the address of a buffer's first byte, and a copy
split over two threads for buffers of 64 MB and up.

A memcpy run by one thread reached ~31 GB/s into shared memory on the 2-core machine this was
measured on, and two threads, each copying half without the GIL, ~51 GB/s: a single thread
cannot use all of the memory's bandwidth. Puts of large arrays and writes into the object
store's arena both go through here.
"""

from __future__ import annotations

import ctypes
import threading

PARALLEL_COPY = 64 << 20  # from here a copy is split over two threads
_PAGE = 4096


class _PyBuffer(ctypes.Structure):
    # The Py_buffer struct of the C API (stable since Python 3.3), to read a buffer's address.
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


def address_of(buf: memoryview) -> int | None:
    """The address of a contiguous buffer's first byte, or None if it cannot be had."""
    view = _PyBuffer()
    try:
        if _get_buffer(buf, ctypes.byref(view), 0) != 0:
            return None
    except Exception:
        return None
    try:
        return view.buf
    finally:
        _release_buffer(ctypes.byref(view))


def copy(dst: memoryview, src: memoryview) -> None:
    """``dst[:] = src`` for two contiguous byte views of one size; in two halves on two
    threads when large. Both views are held throughout, so neither buffer can be released
    or unmapped under the copy (an mmap with a view open refuses to close)."""
    n = src.nbytes
    if n < PARALLEL_COPY:
        dst[:] = src
        return
    d, s = address_of(dst), address_of(src)
    if d is None or s is None:
        dst[:] = src
        return
    half = (n // 2) & ~(_PAGE - 1)
    helper = threading.Thread(
        target=ctypes.memmove, args=(d + half, s + half, n - half), daemon=True
    )
    helper.start()
    ctypes.memmove(d, s, half)
    helper.join()
