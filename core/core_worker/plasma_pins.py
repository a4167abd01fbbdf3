"""The read pins this process holds on objects in its node's shared-memory store.

A zero-copy ``get`` pins the object at the raylet (``plasma_get``) so its memory cannot be
freed, evicted or spilled while a value backed by it lives. The pin is what costs: a round
trip to the raylet through the I/O thread, several times the rest of a ``get`` of a large
array. So a pin whose last view is released is kept a moment (``HOLD_S``), and the next
``get`` of the same object in that window maps it again at once, as plasma clients keep
the objects they use. The raylet still sees every pin it granted: a held pin is released
after ``HOLD_S`` idle, as soon as this process drops its last reference to the object, when
more than ``MAX_IDLE`` are idle, or when this process finds the store full.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ember import config

HOLD_S = config.plasma_pin_hold_seconds
MAX_IDLE = 128


class _Pin:
    __slots__ = ("offset", "size", "views", "idle_since", "unreferenced")

    def __init__(self, offset: int, size: int) -> None:
        self.offset, self.size, self.views, self.idle_since = offset, size, 1, 0.0
        self.unreferenced = False  # the process dropped its last reference: no holding


class PlasmaPins:
    """``{object_id: pin}``, each with its count of live views. ``send_release(object_id,
    offset)`` tells the raylet a pin is given back (any thread); ``call_later(delay, fn)``
    runs ``fn`` later on the I/O loop (any thread)."""

    def __init__(
        self,
        send_release: Callable[[bytes, int], None],
        call_later: Callable[[float, Callable[[], None]], None],
        hold_s: float = HOLD_S,
        max_idle: int = MAX_IDLE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._send_release = send_release
        self._call_later = call_later
        self._hold_s, self._max_idle = hold_s, max_idle
        self._lock = threading.Lock()
        self._pins: dict[bytes, _Pin] = {}
        self._idle: OrderedDict[bytes, None] = OrderedDict()  # oldest first
        self._sweep_due = False
        self.hits = self.misses = 0

    def acquire(self, object_id: bytes) -> tuple[int, int] | None:
        """``(offset, size)`` with one more view counted, if this process holds the pin."""
        with self._lock:
            pin = self._pins.get(object_id)
            if pin is None:
                self.misses += 1
                return None
            self.hits += 1
            if not pin.views:
                self._idle.pop(object_id, None)
            pin.views += 1
            return pin.offset, pin.size

    def add(self, object_id: bytes, offset: int, size: int, referenced: bool = True) -> None:
        """A pin the raylet just granted, with its first view. A second pin of the same
        object (two threads missed at once) is given back at once: one is enough. A pin on
        an object this process holds no reference to (a task's argument passed by value) is
        never held: no ``forget`` would come when it is done with."""
        with self._lock:
            pin = self._pins.get(object_id)
            if pin is None:
                pin = self._pins[object_id] = _Pin(offset, size)
                pin.unreferenced = not referenced
                return
            if not pin.views:
                self._idle.pop(object_id, None)
            pin.views += 1
        self._send_release(object_id, offset)

    def add_idle(self, object_id: bytes, offset: int, size: int) -> None:
        """A pin granted ahead of its first view (a batch of a ``get`` of many): held as if
        its last view had just gone, so it is given back if no view ever comes."""
        schedule = False
        with self._lock:
            if object_id in self._pins:
                duplicate = True
            else:
                duplicate = False
                pin = self._pins[object_id] = _Pin(offset, size)
                pin.views, pin.idle_since = 0, self._clock()
                self._idle[object_id] = None
                if not self._sweep_due:
                    self._sweep_due = schedule = True
        if duplicate:
            self._send_release(object_id, offset)
        if schedule:
            self._call_later(self._hold_s, self._sweep)

    def holds(self, object_id: bytes) -> bool:
        return object_id in self._pins

    def release_view(self, object_id: bytes) -> None:
        """A view is gone. At the last one the pin is kept a moment, unless this process no
        longer references the object (its owner may be freeing it)."""
        expired: list[tuple[bytes, int]] = []
        schedule = False
        with self._lock:
            pin = self._pins.get(object_id)
            if pin is None:
                return
            pin.views -= 1
            if pin.views:
                return
            if pin.unreferenced or self._hold_s <= 0:  # (holding is off at 0)
                del self._pins[object_id]
                expired.append((object_id, pin.offset))
            else:
                pin.idle_since = self._clock()
                self._idle[object_id] = None
                while len(self._idle) > self._max_idle:
                    oid, _ = self._idle.popitem(last=False)
                    expired.append((oid, self._pins.pop(oid).offset))
                if self._idle and not self._sweep_due:
                    self._sweep_due = schedule = True
        for oid, offset in expired:
            self._send_release(oid, offset)
        if schedule:
            self._call_later(self._hold_s, self._sweep)

    def forget(self, object_id: bytes) -> None:
        """This process no longer references the object: its pin goes once no view is left
        (now, if none is)."""
        with self._lock:
            pin = self._pins.get(object_id)
            if pin is None:
                return
            if pin.views:
                pin.unreferenced = True
                return
            del self._pins[object_id]
            self._idle.pop(object_id, None)
        self._send_release(object_id, pin.offset)

    def release_idle(self) -> int:
        """Gives back every idle pin (the store is full: they may hold what must go).
        Returns how many."""
        with self._lock:
            gone = [(oid, self._pins.pop(oid).offset) for oid in self._idle]
            self._idle.clear()
        for oid, offset in gone:
            self._send_release(oid, offset)
        return len(gone)

    def views(self) -> dict[bytes, tuple[int, int]]:
        """``{object_id: (live views, size)}`` of the objects a value here is backed by."""
        with self._lock:
            return {oid: (p.views, p.size) for oid, p in self._pins.items() if p.views}

    def held(self) -> int:
        with self._lock:
            return len(self._pins)

    def _sweep(self) -> None:
        now = self._clock()
        gone: list[tuple[bytes, int]] = []
        with self._lock:
            while self._idle:
                oid = next(iter(self._idle))
                if now - self._pins[oid].idle_since < self._hold_s:
                    break
                del self._idle[oid]
                gone.append((oid, self._pins.pop(oid).offset))
            wait = None
            if self._idle:
                oldest = self._pins[next(iter(self._idle))]
                wait = self._hold_s - (now - oldest.idle_since)
            self._sweep_due = wait is not None
        for oid, offset in gone:
            self._send_release(oid, offset)
        if wait is not None:
            self._call_later(max(0.05, wait), self._sweep)
