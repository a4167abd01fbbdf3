"""Where a worker's ``.out`` and ``.err`` files end, asked before and after each task so its
reply can say which bytes the task printed (Ray's ``task_log_info``).

Asking the files costs two system calls, and each releases the GIL to the worker's I/O
thread: four per task were a tenth of a pipelined actor call's cost. So the worker's own
``sys.stdout``/``sys.stderr`` count what they write, and the files are asked again only when
Python code printed since the last answer or when that answer is older than ``FRESH_S``.
Bytes written to the descriptors behind Python's back (a subprocess, C code) within that
window show in the range of the next task that asks, not of the one that wrote them.
"""

from __future__ import annotations

import io
import os
import time

FRESH_S = 0.005  # shorter than any task that runs a subprocess


class CountingFile(io.FileIO):
    """An unbuffered file that counts the bytes written through it."""

    written = 0

    def write(self, data) -> int:  # type: ignore[override]
        n = super().write(data)
        if n:
            self.written += n
        return n


def counting_stream(fd: int) -> tuple[io.TextIOWrapper, CountingFile]:
    """A line-buffered text stream on ``fd``, and the counting file under it."""
    raw = CountingFile(fd, "wb", closefd=False)
    return io.TextIOWrapper(raw, line_buffering=True), raw


class LogOffsets:
    """The sizes of fds 1 and 2 (opened with O_APPEND: a task's output lands after them)."""

    def __init__(self, out: CountingFile, err: CountingFile) -> None:
        self._out, self._err = out, err
        self._at = (-1, -1)
        self._counts = (-1, -1)
        self._asked = 0.0

    def now(self) -> tuple[int, int]:
        counts = (self._out.written, self._err.written)
        now = time.monotonic()
        if counts != self._counts or now - self._asked >= FRESH_S:
            # A seek to the end says the size without building a stat result; with
            # O_APPEND, moving the offset changes where nothing is written.
            self._at = (os.lseek(1, 0, os.SEEK_END), os.lseek(2, 0, os.SEEK_END))
            self._counts, self._asked = counts, now
        return self._at
