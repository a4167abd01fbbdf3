"""What the CLI draws only for a person at a terminal: colour and a progress spinner.

Both are off when the stream is not a terminal (a pipe, a file, a test) and colour is off
when ``NO_COLOR`` is set and not empty (https://no-color.org) or ``TERM=dumb``: a script
reading ``ember``'s output never gets escape sequences or spinner frames.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from types import TracebackType
from typing import IO

FRAMES = "|/-\\"
INTERVAL = 0.1  # seconds between frames


def is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or stand-in stream
        return False


def colour(stream: IO[str]) -> bool:
    """Whether ``stream`` takes ANSI colour."""
    return (
        is_terminal(stream) and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    )


class Spinner:
    """``with Spinner("waiting for job x to start") as s: ...``: on a terminal (stderr), one
    line redrawn every ``INTERVAL`` with a turning bar, the seconds waited and ``s.note``
    (what the wait is at); erased at the end. On a pipe it draws nothing at all."""

    def __init__(self, text: str, stream: IO[str] | None = None) -> None:
        self.text = text
        self.note = ""
        self._stream = stream or sys.stderr
        self._on = is_terminal(self._stream)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._width = 0

    def __enter__(self) -> Spinner:
        if self._on:
            self._thread = threading.Thread(target=self._run, name="ember-spinner", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Erases the line (idempotent): call before printing anything else."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._draw(" " * self._width)
        self._draw("")

    def _run(self) -> None:
        start = time.monotonic()
        for frame in itertools.cycle(FRAMES):
            waited = time.monotonic() - start
            note = f": {self.note}" if self.note else ""
            line = f"{frame} {self.text} ({waited:.0f} s){note}"
            self._draw(line.ljust(self._width))
            self._width = max(self._width, len(line))
            if self._stop.wait(INTERVAL):
                return

    def _draw(self, line: str) -> None:
        try:
            self._stream.write(f"\r{line}\r" if line else "\r")
            self._stream.flush()
        except (OSError, ValueError):
            pass  # the terminal went away: the wait itself goes on
