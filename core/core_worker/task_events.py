"""This process's task events: a bounded buffer of state changes, for the dashboard.

Recording is one ``deque.append`` of a tuple ``(task_id, state, time, attempt, extra)``: it
runs several times per task on the submit path. ``state`` is the plain string the dashboard
and the timeline read (Ray's task state names, plus ``RETRYING`` and ``PROFILE``). When the
buffer is full the oldest event falls out and is counted in ``dropped``; the exporter
(``event_export.py``) sends what is new to the node's agent and reports the count.

What the buffer holds is plain data: an event's ``extra`` is packed (``pack_extra``) into a
flat tuple of keys and values, a dict inside it (``timings``) likewise. CPython's collector
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

# Where a dict or a list was in an event's extra, its items follow under "key.subkey" (a
# list's: "key.0", "key.1", ...). Flat because the collector untracks a tuple only once all
# in it is untracked, one level a pass, and its passes see an event's tuples outer first: an
# event two levels deep is untracked by its second young collection, one three deep only in
# the oldest generation, which is the cost avoided.
NESTED = "\x00dict"
NESTED_LIST = "\x00list"


class _Dotted(dict):
    """``{subkey: "key.subkey"}`` of one key, made on first use and kept for the first few
    (the dicts packed are Ember's own, with a few fixed keys; lists' indexes are small)."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    def __missing__(self, subkey: Any) -> str:
        dotted = f"{self.key}.{subkey}"
        if len(self) < 64:
            self[subkey] = dotted
        return dotted


_DOTTED: dict[str, _Dotted] = {}


def _dotted(key: str) -> _Dotted:
    d = _DOTTED.get(key)
    if d is None:
        d = _Dotted(key)
        if len(_DOTTED) < 64:
            _DOTTED[key] = d
    return d


def packed_dict(key: str, d: dict[str, Any] | None) -> tuple:
    """``key: d`` packed: ``(key, NESTED, "key.a", d["a"], ...)``; ``(key, None)`` for an
    empty or missing dict."""
    if not d:
        return (key, None)
    names = _dotted(key)
    return (
        key,
        NESTED,
        *chain.from_iterable(zip(map(names.__getitem__, d), d.values(), strict=True)),
    )


def _packed_list(key: str, items: list | tuple) -> tuple:
    names = _dotted(key)
    return (
        key,
        NESTED_LIST,
        *chain.from_iterable(zip(map(names.__getitem__, range(len(items))), items, strict=True)),
    )


def pack_extra(extra: dict[str, Any]) -> tuple:
    """``extra`` as the buffer keeps it: ``(key, value, key, value, ...)``, a dict's or a
    list's items spread into it, so nothing in it keeps the event tracked by the collector
    (see the module doc)."""
    out: list[Any] = []
    for k, v in extra.items():
        t = type(v)
        if t is dict:
            out += packed_dict(k, v)
        elif t is list or t is tuple:
            out += _packed_list(k, v)
        else:
            out += (k, v)
    return tuple(out)


def unpack_extra(extra: Any) -> Any:
    """A buffered event's ``extra`` as a dict again (``pack_extra``'s inverse, a tuple
    coming back as a list); a dict or None as it is."""
    if type(extra) is not tuple:
        return extra
    d = dict(zip(extra[::2], extra[1::2], strict=True))
    nested = [k for k, v in d.items() if v == NESTED or v == NESTED_LIST]
    for k in nested:
        prefix = k + "."
        n = len(prefix)
        items = {key[n:]: d.pop(key) for key in [x for x in d if x.startswith(prefix)]}
        d[k] = items if d[k] == NESTED else list(items.values())
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
