"""The process's own object table: values of small objects and where large ones live.

An entry is pending until the value (or where it is) arrives. Waiters are callbacks so one
``get`` of 1,000 refs waits on one event, not 1,000. Thread-safe: results arrive on the I/O
thread while the user's thread reads.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

# What an entry holds once ready:
#   ("inline", meta, data, buffers)   the serialized value itself
#   ("plasma", node_id, size)         a sealed copy in that node's shared-memory store
Location = tuple


class _Entry:
    __slots__ = ("value", "waiters", "cached")

    def __init__(self) -> None:
        self.value: Location | None = None
        self.waiters: list[Callable[[bytes, Location], None]] | None = None
        self.cached: Any = _MISSING  # a deserialized value worth keeping (plasma views)


_MISSING = object()


class MemoryStore:
    def __init__(self) -> None:
        self._entries: dict[bytes, _Entry] = {}  # {object_id: _Entry}
        # The ready entries' values again, so ``first_ready`` and ``unknown`` can look over a
        # long list of ids at C speed (``wait`` in a loop over 1,000 refs does per call).
        self._ready: dict[bytes, Location] = {}
        self._lock = threading.Lock()
        # ``wait`` on many refs watches the store as a whole rather than registering a
        # callback on each ref every time it is called (a loop waiting on 1,000 refs one by
        # one registered and removed ~500,000): a put bumps the generation, and wakes the
        # watchers only when there are some.
        self.generation = 0
        self._watchers = 0
        self._changed = threading.Condition(self._lock)
        # Told of the ids someone starts waiting on (outside the lock), when set: a driver
        # whose threads read their own actor replies hands such a wait to the I/O thread.
        self.wait_hook: Callable[[list[bytes]], None] | None = None

    def put(self, object_id: bytes, value: Location) -> None:
        """Makes the object ready; runs its waiters (outside the lock)."""
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is None:
                entry = self._entries[object_id] = _Entry()
            elif entry.value is not None and entry.value[0] == "inline" and value[0] != "inline":
                return  # keep the value we already have
            entry.value = value
            self._ready[object_id] = value
            waiters, entry.waiters = entry.waiters, None
            self.generation += 1
            if self._watchers:
                self._changed.notify_all()
        if waiters:
            for cb in waiters:
                cb(object_id, value)

    def add_pending(self, object_id: bytes) -> None:
        with self._lock:
            if object_id not in self._entries:
                self._entries[object_id] = _Entry()

    def add_pending_many(self, object_ids: list[bytes]) -> None:
        with self._lock:
            entries = self._entries
            for object_id in object_ids:
                if object_id not in entries:
                    entries[object_id] = _Entry()

    def get_if_ready(self, object_id: bytes) -> Location | None:
        entry = self._entries.get(object_id)
        return None if entry is None else entry.value

    def first_ready(self, object_ids: list[bytes]) -> int:
        """The position of the first ready id in ``object_ids``, or -1."""
        hit = next(filter(self._ready.__contains__, object_ids), None)
        return -1 if hit is None else object_ids.index(hit)

    def unknown(self, object_ids: list[bytes]) -> list[bytes]:
        """The ids this store has no entry for (neither ready nor pending)."""
        return list(itertools.filterfalse(self._entries.__contains__, object_ids))

    def contains(self, object_id: bytes) -> bool:
        return object_id in self._entries

    def on_ready(self, object_id: bytes, callback: Callable[[bytes, Location], None]) -> bool:
        """Calls ``callback(id, value)`` once ready (now, if it is). False if unknown here."""
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is None:
                entry = self._entries[object_id] = _Entry()
            if entry.value is None:
                if entry.waiters is None:
                    entry.waiters = []
                entry.waiters.append(callback)
                value = None
            else:
                value = entry.value
        if value is None:
            if self.wait_hook is not None:
                self.wait_hook([object_id])
            return True
        callback(object_id, value)
        return True

    def on_ready_many(
        self, object_ids: list[bytes], callback: Callable[[bytes, Location], None]
    ) -> None:
        """``on_ready`` for many ids under one lock (``wait`` registers on every ref it
        still waits for, each time it is called); the ready ones are called after it."""
        ready = []
        with self._lock:
            entries = self._entries
            for object_id in object_ids:
                entry = entries.get(object_id)
                if entry is None:
                    entry = entries[object_id] = _Entry()
                if entry.value is not None:
                    ready.append((object_id, entry.value))
                elif entry.waiters is None:
                    entry.waiters = [callback]
                else:
                    entry.waiters.append(callback)
        if self.wait_hook is not None:
            self.wait_hook(object_ids)
        for object_id, value in ready:
            callback(object_id, value)

    def wait_for_change(self, generation: int, timeout: float | None) -> bool:
        """Blocks until the store's generation is past ``generation`` (an object became
        ready, or ``touch`` was called) or ``timeout`` s passed; whether it changed."""
        with self._lock:
            if self.generation != generation:
                return True
            self._watchers += 1
            try:
                return self._changed.wait_for(lambda: self.generation != generation, timeout)
            finally:
                self._watchers -= 1

    def touch(self) -> None:
        """Wakes ``wait_for_change`` without a put (a pull for ``wait`` finished)."""
        with self._lock:
            self.generation += 1
            if self._watchers:
                self._changed.notify_all()

    def remove_waiter(self, object_id: bytes, callback: Callable) -> None:
        self.remove_waiter_many((object_id,), callback)

    def remove_waiter_many(self, object_ids, callback: Callable) -> None:
        with self._lock:
            entries = self._entries
            for object_id in object_ids:
                entry = entries.get(object_id)
                if entry is not None and entry.waiters and callback in entry.waiters:
                    entry.waiters.remove(callback)

    def get_cached(self, object_id: bytes) -> Any:
        entry = self._entries.get(object_id)
        return _MISSING if entry is None else entry.cached

    def set_cached(self, object_id: bytes, value: Any) -> None:
        entry = self._entries.get(object_id)
        if entry is not None:
            entry.cached = value

    def delete(self, object_id: bytes) -> Location | None:
        with self._lock:
            entry = self._entries.pop(object_id, None)
            self._ready.pop(object_id, None)
        return None if entry is None else entry.value

    def pending_ids(self) -> list[bytes]:
        with self._lock:
            return [oid for oid, e in self._entries.items() if e.value is None]

    def reset(self, object_id: bytes) -> None:
        """Makes a ready object pending again (it is being rebuilt from its lineage)."""
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is not None:
                entry.value = None
                entry.cached = _MISSING
                self._ready.pop(object_id, None)

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> dict[str, int]:
        inline = plasma = pending = 0
        inline_bytes = 0
        for entry in list(self._entries.values()):
            v = entry.value
            if v is None:
                pending += 1
            elif v[0] == "inline":
                inline += 1
                inline_bytes += len(v[2]) + sum(len(b) for b in v[3])
            else:
                plasma += 1
        return {
            "num_inline": inline,
            "inline_bytes": inline_bytes,
            "num_in_plasma": plasma,
            "num_pending": pending,
        }


MISSING = _MISSING
