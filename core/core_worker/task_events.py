"""This process's task events: a bounded buffer of state changes, for the dashboard.

Recording is one ``deque.append`` of a tuple ``(task_id, state, time, attempt, extra)``: it
runs several times per task on the submit path. ``state`` is the plain string the dashboard
and the timeline read (Ray's task state names, plus ``RETRYING`` and ``PROFILE``). When the
buffer is full the oldest event falls out and is counted in ``dropped``; the exporter
(``event_export.py``) sends what is new to the node's agent and reports the count.

What the buffer holds is plain data: an event's ``extra`` is packed (``pack_extra``) into a
flat tuple of keys and values, a dict or list in it (``timings``, ``log``) in a section of
its own at the end. CPython's collector
stops tracking a tuple of strings, bytes and numbers at the first collection that sees it,
but never a tuple holding a dict: with dicts, the buffer's 100,000 events of the last seconds
were all tracked, all lived to the oldest generation, and drove full collections of the
whole heap (measured in a driver making 1:1 async actor calls: ~2.7 a second, ~76 ms each, a
fifth of its time). The node's agent unpacks each event as it arrives (``unpack_extra``);
events with a dict ``extra`` (a RUNNING event's, a profile span) are taken as they are.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from itertools import chain
from typing import Any

from ember import config
from ember.core_worker.task_spec import TaskSpec

# A packed extra is ``(key, value, key, value, ...)`` when its values are plain; one with a
# dict or a list in it is ``(PACKED, n, <n plain pairs>, <sections>)``, each section a
# dict's ``(key, DICT, len, k, v, k, v...)`` or a list's ``(key, LIST, len, items...)``.
# Flat because the collector untracks a tuple only once all in it is untracked, one level a
# pass, and its passes see an event's tuples outer first: an event two levels deep is
# untracked by its second young collection, one three deep only in the oldest generation,
# which is the cost avoided. The plain pairs first: the agent unpacks them in one C call.
PACKED = "\x00packed"
DICT, LIST = 1, 2


def packed_sections(plain: tuple, sections: tuple) -> tuple:
    """An extra of ``plain`` pairs and dict or list ``sections`` (``dict_section``...)."""
    return (PACKED, len(plain) // 2, *plain, *sections) if sections else plain


def dict_section(key: str, d: dict[str, Any]) -> tuple:
    return (key, DICT, len(d), *chain.from_iterable(d.items()))


def list_section(key: str, items: list | tuple) -> tuple:
    return (key, LIST, len(items), *items)


def pack_extra(extra: dict[str, Any]) -> tuple:
    """``extra`` as the buffer keeps it (see above), so nothing in it keeps the event
    tracked by the collector (see the module doc). A dict's or list's own items are taken as
    they are (Ember's are plain)."""
    plain: list[Any] = []
    sections: list[Any] = []
    for k, v in extra.items():
        t = type(v)
        if t is dict:
            sections += dict_section(k, v)
        elif t is list or t is tuple:
            sections += list_section(k, v)
        else:
            plain += (k, v)
    return packed_sections(tuple(plain), tuple(sections))


def unpack_extra(extra: Any) -> Any:
    """A buffered event's ``extra`` as a dict again (``pack_extra``'s inverse, a tuple
    coming back as a list, as from JSON); a dict or None as it is."""
    if type(extra) is not tuple:
        return extra
    if not extra or extra[0] != PACKED:
        return dict(zip(extra[::2], extra[1::2], strict=True))
    end = 2 + 2 * extra[1]
    d = dict(zip(extra[2:end:2], extra[3:end:2], strict=True))
    i, size = end, len(extra)
    while i < size:
        key, kind, n = extra[i], extra[i + 1], extra[i + 2]
        i += 3
        if kind == DICT:
            d[key] = dict(zip(extra[i : i + 2 * n : 2], extra[i + 1 : i + 2 * n : 2], strict=True))
            i += 2 * n
        else:
            d[key] = list(extra[i : i + n])
            i += n
    return d


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
        packed = pack_extra(extra) if extra else None
        self.append((spec.task_id, state, time.time(), spec.attempt, packed))

    def record_shared(self, spec: TaskSpec, state: str, extra: tuple) -> None:
        """As ``record``, with an ``extra`` packed already (``pack_extra``), which the caller
        may keep and reuse: the hot path's events build nothing of their own."""
        self.append((spec.task_id, state, time.time(), spec.attempt, extra))

    def record_attempt_failed(
        self, spec: TaskSpec, attempt: int, error: str, error_type: str, **where: Any
    ) -> None:
        """An earlier attempt of a task that is retried ended FAILED (``where``: the node,
        worker and pid it ran on, when the caller knows them): its own row's end."""
        extra = pack_extra({"error": error, "error_type": error_type, **where})
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
