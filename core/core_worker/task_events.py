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
        # RUNNING events of tasks running here, by task id, held until the exporter's next
        # flush (see ``record_start``).
        self.starts: dict[bytes, tuple] = {}

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

    def record_start(self, event: tuple) -> None:
        """A task's RUNNING event, held apart until the next flush. A task that ends first
        loses it (``ended_here``): the end its owner records carries the same facts (the
        worker, pid, node and start time ride in the reply), so a call shorter than the
        flush period costs the agent and the dashboard one event fewer. One still running
        at the flush is sent then, as before."""
        self.starts[event[0]] = event
        if self.wake is not None:
            self._wake()

    def ended_here(self, task_id: bytes) -> None:
        """The task's reply, which says where and when it ran, is on its way to its owner."""
        self.starts.pop(task_id, None)

    def take_starts(self) -> list[tuple]:
        """The held RUNNING events of tasks still running (each taken once)."""
        starts = self.starts
        if not starts:
            return []
        out = []
        for task_id in list(starts):
            event = starts.pop(task_id, None)  # the task may end meanwhile, on its thread
            if event is not None:
                out.append(event)
        return out

    def append(self, event: tuple) -> None:
        """Into the bounded buffer; the oldest event falls out and is counted as dropped
        (the exporter reports the count to the agent with its next batch)."""
        events = self.buffer
        if len(events) == events.maxlen:
            self.dropped += 1
        events.append(event)
        if self.wake is not None:
            self._wake()

    def _wake(self) -> None:
        wake, self.wake = self.wake, None
        if wake is None:  # another thread woke it first
            return
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
