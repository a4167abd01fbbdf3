"""The session's history on disk: what the dashboard ingests (agents' samples, task events,
actors, events; the GCS's actors, jobs, cluster and events; submitted jobs' records),
appended to ``<session_dir>/history/`` (``history_format``: segments of framed records) so
that it outlives the cluster. ``history_reader`` replays them into a fresh
``DashboardState``, so the history server answers every page with the live dashboard's code.

Off the request path: ``record`` (on the dashboard's loop) encodes the record (so no object
the loop goes on mutating is shared with another thread) and appends it to a bounded queue;
a thread writes the queue out every ``EMBER_HISTORY_FLUSH_S`` seconds, rotates segments at
``EMBER_HISTORY_SEGMENT_BYTES`` (compressing the closed one) and applies the retention
limits (``EMBER_HISTORY_MAX_BYTES`` of compressed segments, ``EMBER_HISTORY_MAX_AGE_S``).
Whatever is dropped (past the queue's bound, or by retention) is counted in
``history/dropped.json``, logged, and shown as a ``HISTORY_DROPPED`` event and in
``/api/cluster_status``'s ``dropped``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import deque
from typing import Any

from ember.dashboard import history_format as fmt

logger = logging.getLogger("ember.dashboard")

DROPPED_FILE = "dropped.json"


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None


def flush_seconds() -> float:
    """How often the writer's thread writes the queue out: what a killed dashboard can lose."""
    return _env_float("EMBER_HISTORY_FLUSH_S", 1.0)


def enabled() -> bool:
    """``EMBER_HISTORY=0`` turns the writer off (the history server then finds nothing)."""
    return os.environ.get("EMBER_HISTORY", "1") not in ("0", "false", "no", "")


def read_dropped(history_dir: str) -> dict[str, Any]:
    try:
        with open(os.path.join(history_dir, DROPPED_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


class HistoryWriter:
    def __init__(
        self,
        session_dir: str,
        *,
        flush_s: float | None = None,
        segment_bytes: int | None = None,
        max_bytes: int | None = None,
        max_age_s: float | None = None,
        max_queue_bytes: int | None = None,
    ) -> None:
        self.dir = os.path.join(session_dir, fmt.HISTORY_DIR)
        os.makedirs(self.dir, exist_ok=True)
        self.flush_s = flush_s if flush_s is not None else flush_seconds()
        self.segment_bytes = int(
            segment_bytes or _env_float("EMBER_HISTORY_SEGMENT_BYTES", 8 * 1024 * 1024)
        )
        self.max_bytes = int(max_bytes or _env_float("EMBER_HISTORY_MAX_BYTES", 512 * 1024 * 1024))
        self.max_age_s = max_age_s or _env_float("EMBER_HISTORY_MAX_AGE_S", 7 * 86_400.0)
        # Lines encoded but not yet written: a disk that stalls costs at most this much memory.
        self.max_queue_bytes = int(
            max_queue_bytes or _env_float("EMBER_HISTORY_MAX_QUEUE_BYTES", 64 * 1024 * 1024)
        )
        if self.segment_bytes <= 0 or self.max_bytes < self.segment_bytes:
            raise ValueError(
                f"EMBER_HISTORY_MAX_BYTES ({self.max_bytes}) must be at least "
                f"EMBER_HISTORY_SEGMENT_BYTES ({self.segment_bytes}), which must be > 0"
            )
        self._queue: deque[bytes] = deque()
        self._queued_bytes = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self.dropped = {"queue_full": 0, "records": 0, "bytes": 0, "segments": 0}
        self.dropped.update({k: v for k, v in read_dropped(self.dir).items() if k in self.dropped})
        self._saved = dict(self.dropped)
        self.written = 0
        self._lines: dict[str, int] = {}  # {segment path: lines} of segments written here
        existing = fmt.segments(self.dir)
        # A dashboard started again in the session opens a new segment after the last.
        self._num = existing[-1][0] + 1 if existing else 1
        self._file: Any = None
        self._path = ""
        self._on_drop: Any = None
        self._thread = threading.Thread(target=self._run, name="ember-history", daemon=True)

    def start(self, on_drop: Any = None) -> None:
        """``on_drop(what, message)`` is called on the loop that called ``start`` whenever
        something is dropped, so the state can show it."""
        if on_drop is not None:
            loop = asyncio.get_running_loop()
            self._on_drop = lambda *a: loop.call_soon_threadsafe(on_drop, *a)
        self._thread.start()

    # -- the loop's side -------------------------------------------------------------------
    def record(self, kind: str, body: dict[str, Any]) -> None:
        line = fmt.encode(time.time(), kind, body)
        with self._lock:
            if self._queued_bytes + len(line) > self.max_queue_bytes:
                self.dropped["queue_full"] += 1
                first = self.dropped["queue_full"] == 1
            else:
                self._queue.append(line)
                self._queued_bytes += len(line)
                return
        if first or self.dropped["queue_full"] % 10_000 == 0:
            self._report(
                "queue_full",
                f"the history writer is {self.max_queue_bytes} bytes behind the disk: "
                f"{self.dropped['queue_full']} records dropped so far",
            )

    def close(self, timeout: float = 5.0) -> None:
        """Writes what is queued, compresses the last segment and stops the thread (within
        ``timeout``)."""
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        else:
            self._flush()
        self._close_segment()

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self.flush_s)
            self._wake.clear()
            try:
                self._flush()
            except OSError as e:  # a full disk: keep the loop going, the queue stays bounded
                logger.warning("could not write the session's history in %s: %s", self.dir, e)
        self._flush()

    def _flush(self) -> None:
        with self._lock:
            lines, self._queue = self._queue, deque()
            self._queued_bytes = 0
        if lines:
            self._write(lines)
        self._save_dropped()

    def _write(self, lines: deque[bytes]) -> None:
        for line in lines:
            if self._file is None or self._file.tell() >= self.segment_bytes:
                self._rotate()
            self._file.write(line)
            self._lines[self._path] = self._lines.get(self._path, 0) + 1
        self.written += len(lines)
        self._file.flush()

    def _rotate(self) -> None:
        self._close_segment()
        self._path = fmt.segment_path(self.dir, self._num)
        self._num += 1
        self._file = open(self._path, "ab")  # noqa: SIM115 (kept open across flushes)
        self._retain()

    def _close_segment(self) -> None:
        if self._file is None:
            return
        self._file.close()
        self._file = None
        try:
            packed = fmt.compress(self._path)
        except OSError as e:  # kept plain: the reader reads both
            logger.warning("could not compress %s: %s", self._path, e)
            return
        if self._path in self._lines:
            self._lines[packed] = self._lines.pop(self._path)

    def _retain(self) -> None:
        """Deletes the oldest segments (never the one being written) past the size or age
        limit, counting what they held."""
        segs = [(p, os.stat(p)) for _, p in fmt.segments(self.dir) if p != self._path]
        total = sum(st.st_size for _, st in segs)
        now = time.time()
        for path, st in segs:
            too_old = now - st.st_mtime > self.max_age_s
            if not too_old and total + self.segment_bytes <= self.max_bytes:
                break
            lines = self._lines.pop(path, None)
            if lines is None:
                lines = fmt.count(path)
            try:
                os.unlink(path)
            except OSError:
                continue
            total -= st.st_size
            self.dropped["segments"] += 1
            self.dropped["records"] += lines
            self.dropped["bytes"] += st.st_size
            why = f"older than {self.max_age_s:g} s" if too_old else f"past {self.max_bytes} bytes"
            self._report(
                "records",
                f"history retention dropped {os.path.basename(path)} ({lines} records, "
                f"{st.st_size} bytes, {why}); {self.dropped['records']} records dropped in all",
            )

    def _report(self, what: str, message: str) -> None:
        """Logs and shows a drop; the thread's next flush writes the counts to disk."""
        logger.warning("%s", message)
        if self._on_drop is not None:
            self._on_drop(what, message)
        self._wake.set()

    def _save_dropped(self) -> None:
        counts = dict(self.dropped)
        if counts == self._saved:
            return
        try:
            tmp = os.path.join(self.dir, DROPPED_FILE + ".tmp")
            with open(tmp, "w") as f:
                json.dump(counts, f)
            os.replace(tmp, os.path.join(self.dir, DROPPED_FILE))
            self._saved = counts
        except OSError as e:
            logger.warning("could not write %s: %s", DROPPED_FILE, e)


def attach(state: Any, session_dir: str) -> HistoryWriter | None:
    """Starts a writer for the state (on the running loop), or None when turned off."""
    if not enabled() or not session_dir:
        return None
    try:
        writer = HistoryWriter(session_dir)
    except (ValueError, OSError) as e:  # a bad setting or an unwritable disk: no history
        logger.error("the session's history is off: %s", e)
        return None

    def on_drop(what: str, message: str) -> None:
        state.dropped["history_" + what] = writer.dropped[what]
        state.add_event("WARNING", message, source="dashboard", kind="HISTORY_DROPPED")

    for what in ("queue_full", "records"):
        if writer.dropped[what]:
            state.dropped["history_" + what] = writer.dropped[what]
    writer.start(on_drop)
    state.recorder = writer.record
    return writer
