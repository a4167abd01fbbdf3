"""This process's task events: a bounded buffer of state changes, for the dashboard.

Recording is one ``deque.append`` of a tuple ``(task_id, state, time, attempt, extra)``: it
runs several times per task on the submit path. ``state`` is the plain string the dashboard
and the timeline read (Ray's task state names, plus ``RETRYING`` and ``PROFILE``). When the
buffer is full the oldest event falls out and is counted in ``dropped``; the exporter
(``event_export.py``) sends what is new to the node's agent and reports the count.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import Any

from ember import config
from ember.core_worker.task_spec import TaskSpec


class TaskEvents:
    def __init__(self, current: threading.local, root_task_id: bytes) -> None:
        self.buffer: deque = deque(maxlen=config.task_events_buffer_size)
        self.dropped = 0  # events that fell out of the buffer, ever
        self._current = current
        self._root_task_id = root_task_id
        # Set by the exporter while it sleeps for want of events: the next one wakes it.
        self.wake: Any = None

    def record(self, spec: TaskSpec, state: str, **extra: Any) -> None:
        self.append((spec.task_id, state, time.time(), spec.attempt, extra or None))

    def record_shared(self, spec: TaskSpec, state: str, extra: dict) -> None:
        """As ``record``, with an ``extra`` the caller keeps and reuses (never changed once
        recorded): the hot path's events build no dict of their own."""
        self.append((spec.task_id, state, time.time(), spec.attempt, extra))

    def record_attempt_failed(
        self, spec: TaskSpec, attempt: int, error: str, error_type: str, **where: Any
    ) -> None:
        """An earlier attempt of a task that is retried ended FAILED (``where``: the node,
        worker and pid it ran on, when the caller knows them): its own row's end."""
        extra = {"error": error, "error_type": error_type, **where}
        self.append((spec.task_id, "FAILED", time.time(), attempt, extra))

    def append(self, event: tuple) -> None:
        """Into the bounded buffer; the oldest event falls out and is counted as dropped
        (the exporter reports the count to the agent with its next batch)."""
        events = self.buffer
        if len(events) == events.maxlen:
            self.dropped += 1
        events.append(event)
        if self.wake is not None:
            wake, self.wake = self.wake, None
            try:
                wake()
            except RuntimeError:  # the loop closed meanwhile (shutdown): nothing to wake
                pass

    def record_profile(self, name: str, start: float, end: float, extra: dict) -> None:
        """A span of ``ember.profile``; inside a task it travels back with the task's reply."""
        event = {"event_type": name, "end": end, "extra": extra, "pid": os.getpid()}
        spans = getattr(self._current, "profile_spans", None)
        if spans is not None:
            spans.append((start, event))
            return
        task_id = getattr(self._current, "task_id", None) or self._root_task_id
        self.append((task_id, "PROFILE", start, 0, event))
