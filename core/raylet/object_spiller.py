"""The raylet's spilling: primary copies go to disk when the store is under pressure and come
back when someone reads them (Ray's object spilling, done inside the raylet).

Two things trigger a spill:
- the store passes its high-water mark (``object_spilling_threshold`` of the capacity, counting
  memory that cannot simply be dropped): a background task spills the least recently used
  primaries nobody maps, in batches of up to ``object_spilling_batch_bytes``, until it is
  back under the mark;
- a ``create`` (a put, a task's return, a pull, a restore) cannot fit: the store names the
  adjacent primaries whose room would take it (``ember.object_store.room``), those are
  spilled, and the create tries again.

Clients never see it: an object's location stays its node, and ``plasma_get`` (or another
node's ``export_object``) of a spilled object reads it back first (``restore``, one read
however many ask). The bytes move on this module's threads, between the arena mapping and
the files of ``ember.object_store.spill``: the event loop does only the bookkeeping, so the
raylet keeps answering (heartbeats included) while gigabytes move. A spilled object's file
is deleted when the object is (its owner freed it, or died).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ember.exceptions import ObjectStoreFullError
from ember.object_store.spill import SpillFiles, SpillSpaceError
from ember.object_store.store import MoveNeeded, ObjectStore, SpillNeeded

logger = logging.getLogger("ember.raylet")

# How long a create or restore may wait for spills to make room before it gives up.
ROOM_DEADLINE_SECONDS = 120.0
# Objects written per batch at most (each its own file).
MAX_BATCH_OBJECTS = 1000
# Bytes copied at a time when an object moves within the arena.
MOVE_CHUNK = 8 * 1024 * 1024


class ObjectSpiller:
    def __init__(
        self,
        store: ObjectStore,
        arena: Callable[[], Any],
        files: SpillFiles | None,
        threshold: float = 0.8,
        batch_bytes: int = 100 * 1024 * 1024,
        grace_seconds: float = 2.0,
        on_pressure: Callable[[], None] | None = None,
    ) -> None:
        if not 0 < threshold <= 1:
            raise ValueError(
                f"object_spilling_threshold must be in (0, 1], got {threshold}: it is the "
                f"fraction of the store's capacity above which objects spill"
            )
        self.store = store
        self._arena = arena  # the raylet's mapping of the arena, made on first use
        self.files = files  # None: spilling is off
        self.threshold = threshold
        self.batch_bytes = max(1, batch_bytes)
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ember-spill")
        self._restores: dict[bytes, asyncio.Future] = {}
        self._busy: dict[bytes, asyncio.Future] = {}  # objects being moved in the arena
        self._background: asyncio.Future | None = None
        # Spills and moves in flight: their copies are pinned meanwhile, so a create that
        # found no room waits for them before it gives up.
        self._batches: set[asyncio.Future] = set()
        self.last_error = ""
        self.grace_seconds = grace_seconds
        # Called when a create needs room (spilling, or waiting for it): garbage its
        # clients' reference cycles hold may free it (ObjectService.ask_for_gc).
        self.on_pressure = on_pressure or (lambda: None)
        self._room_freed = asyncio.Event()
        self._in_flight = 0  # objects being written now
        self._io = {
            "write_seconds": 0.0,
            "read_seconds": 0.0,
            "failed_writes": 0,
            "moved_objects": 0,
            "moved_bytes": 0,
        }
        store.compacting = True  # moving copies within the arena needs no disk
        if files is not None:
            store.spilling = True
            store.on_spill_freed = self._file_freed

    @property
    def enabled(self) -> bool:
        return self.files is not None

    # -- making room -----------------------------------------------------------------------
    async def create(
        self,
        oid: bytes,
        size: int,
        creator: Any,
        owner: Any,
        primary: bool,
        pending: Exception | None = None,
    ) -> int:
        """``store.create``, moving or spilling copies to make room when it must (``pending``:
        what a first, synchronous try raised, to act on first); checks the high-water mark."""
        offset = await self._with_room(
            oid,
            size,
            lambda: self.store.create(oid, size, creator, owner=owner, primary=primary),
            pending,
        )
        self.check_high_water()
        return offset

    def may_make_room(self, error: Exception) -> bool:
        """Whether a create that failed with ``error`` may succeed after moving or spilling
        copies, once the moves and spills in flight end, or once readers let go."""
        if isinstance(error, MoveNeeded | SpillNeeded) or self._batches:
            return True
        return self.grace_seconds > 0 and self.store.has_pins

    def room_freed(self) -> None:
        """A pin was released or an object deleted: a create waiting for room tries again."""
        self._room_freed.set()

    async def _with_room(
        self,
        oid: bytes,
        size: int,
        attempt: Callable[[], int],
        pending: Exception | None = None,
    ) -> int:
        started = time.monotonic()
        deadline = started + ROOM_DEADLINE_SECONDS
        while True:
            try:
                if pending is not None:
                    # A MoveNeeded holds reservations: it must be carried out, not re-planned.
                    error, pending = pending, None
                    raise error
                return attempt()
            except MoveNeeded as need:
                await self.move(need)
            except SpillNeeded as need:
                self.on_pressure()
                try:
                    if not await self.spill(need.entries):
                        await asyncio.sleep(0.01)  # they were read or freed meanwhile
                except SpillSpaceError as e:
                    raise ObjectStoreFullError(
                        f"Cannot create object {oid.hex()} of {size} bytes in the object "
                        f"store: it is full and spilling to make room failed: {e}"
                    ) from None
            except ObjectStoreFullError:
                self.on_pressure()
                now = time.monotonic()
                if self._batches and now < deadline:
                    # Copies being spilled or moved are pinned meanwhile: wait for them.
                    await asyncio.wait(list(self._batches))
                elif self.store.has_pins and now < started + self.grace_seconds:
                    # Readers may let go soon (held pins last about a second): wait for a
                    # release or a delete, within the grace period.
                    self._room_freed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(
                            self._room_freed.wait(), started + self.grace_seconds - now
                        )
                else:
                    raise
            if time.monotonic() > deadline:
                raise ObjectStoreFullError(
                    f"Cannot create object {oid.hex()} of {size} bytes in the object store: "
                    f"spilling did not make room within {ROOM_DEADLINE_SECONDS:.0f} s"
                )

    def check_high_water(self) -> None:
        """Starts the background spill if the store is past its high-water mark."""
        if self.files is None or self._background is not None or self._excess() <= 0:
            return
        self._background = asyncio.ensure_future(self._spill_down())

    def _excess(self) -> int:
        held = self.store.used_bytes - self.store.evictable_bytes
        return held - int(self.threshold * self.store.capacity)

    async def _spill_down(self) -> None:
        try:
            while (excess := self._excess()) > 0:
                batch = self.store.spill_candidates(
                    min(excess, self.batch_bytes), MAX_BATCH_OBJECTS
                )
                if not batch or not await self.spill(batch):
                    break
        except SpillSpaceError as e:
            if self.last_error != str(e):
                logger.warning("object spilling stopped: %s", e)
            self.last_error = str(e)
        except Exception:
            logger.exception("object spilling failed")
        finally:
            self._background = None

    # -- spilling --------------------------------------------------------------------------
    async def spill(self, entries: list) -> int:
        """Writes these primary copies to disk (one batch, on the spill threads) and frees
        their memory; returns the bytes spilled. Raises SpillSpaceError when the cap or the
        disk refuses and nothing could be spilled."""
        files = self.files
        if files is None:
            return 0
        jobs: list[tuple[Any, int, int, str]] = []
        refused: SpillSpaceError | None = None
        for entry in entries:
            where = self.store.begin_spill(entry)
            if where is None:
                continue  # read, freed or spilled since it was chosen
            offset, size = where
            try:
                path = files.reserve(entry.object_id, size)
            except SpillSpaceError as e:
                self.store.finish_spill(entry, None)
                refused = e
                break
            jobs.append((entry, offset, size, path))
        if not jobs:
            if refused is not None:
                raise refused
            return 0
        loop = asyncio.get_running_loop()
        batch = loop.run_in_executor(self._executor, self._write_batch, jobs)
        self._batches.add(batch)
        self._in_flight += len(jobs)
        try:
            results, seconds = await asyncio.shield(batch)
        finally:
            self._batches.discard(batch)
            self._in_flight -= len(jobs)
        self._io["write_seconds"] += seconds  # summed here: two batches may run at once
        spilled = 0
        for (entry, _offset, size, path), error in zip(jobs, results, strict=True):
            if error is not None:
                files.unreserve(size)
                self.store.finish_spill(entry, None)
                refused = refused or (error if isinstance(error, SpillSpaceError) else None)
                if not isinstance(error, SpillSpaceError):
                    self._io["failed_writes"] += 1
                    logger.warning("could not spill %s: %s", entry.object_id.hex()[:16], error)
                continue
            if self.store.finish_spill(entry, path):
                spilled += size
            else:  # deleted while it was being written
                self._remove_file(path, size)
        if not spilled and refused is not None:
            raise refused
        if spilled:
            logger.info("spilled %d objects (%d bytes)", len(jobs), spilled)
        return spilled

    def _write_batch(
        self, jobs: list[tuple[Any, int, int, str]]
    ) -> tuple[list[Exception | None], float]:
        """On a spill thread: each object to its file; an error per object, or None, and
        the seconds it took."""
        started = time.monotonic()
        out: list[Exception | None] = []
        assert self.files is not None
        try:
            self.files.check_disk(sum(size for _e, _o, size, _p in jobs))
        except SpillSpaceError as e:
            return [e] * len(jobs), 0.0
        arena = self._arena()
        for _entry, offset, size, path in jobs:
            view = arena.writable_view(offset, size)
            try:
                self.files.write(path, view)
                out.append(None)
            except OSError as e:
                out.append(e)
            finally:
                view.release()
        return out, time.monotonic() - started

    # -- compaction ------------------------------------------------------------------------
    async def move(self, need: MoveNeeded) -> None:
        """Copies the chosen objects to their new places (on a spill thread) so their old
        range becomes one free run; readers of them wait meanwhile."""
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(self._executor, self._copy_moves, need.moves)
        for entry, _old, _new in need.moves:
            self._busy[entry.object_id] = job
        self._batches.add(job)
        ok = False
        try:
            await asyncio.shield(job)
            ok = True
        finally:
            self._batches.discard(job)
            for entry, _old, _new in need.moves:
                if self._busy.get(entry.object_id) is job:
                    del self._busy[entry.object_id]
            self.store.finish_moves(need, ok)
        self._io["moved_objects"] += len(need.moves)
        self._io["moved_bytes"] += sum(e.size for e, _o, _n in need.moves)

    def _copy_moves(self, moves: list) -> None:
        arena = self._arena()
        for entry, old, new in moves:
            src = arena.writable_view(old, entry.size)
            dst = arena.writable_view(new, entry.size)
            # In chunks: a memoryview copy holds the GIL, and the loop must keep running. A
            # slide's destination may overlap its source from below: chunks no longer than
            # the distance never overwrite bytes not yet copied.
            step = min(MOVE_CHUNK, abs(old - new)) if abs(old - new) < entry.size else MOVE_CHUNK
            try:
                for i in range(0, entry.size, step):
                    dst[i : i + step] = src[i : i + step]
            finally:
                src.release()
                dst.release()

    # -- restoring -------------------------------------------------------------------------
    async def restore(self, oid: bytes) -> bool:
        """Reads a spilled object back into memory (one read however many ask); False if it
        is not spilled. Raises ObjectStoreFullError when no room can be made for it."""
        moving = self._busy.get(oid)
        if moving is not None:  # being moved in the arena: readable once it is done
            await asyncio.shield(moving)
            return True
        pending = self._restores.get(oid)
        if pending is None:
            if self.store.spilled_entry(oid) is None:
                return False
            pending = asyncio.ensure_future(self._restore(oid))
            self._restores[oid] = pending
            pending.add_done_callback(lambda _f, oid=oid: self._restores.pop(oid, None))
        await asyncio.shield(pending)
        return True

    async def _restore(self, oid: bytes) -> None:
        entry = self.store.spilled_entry(oid)
        if entry is None:
            return
        size = entry.size

        def attempt() -> int:
            if self.store.spilled_entry(oid) is not entry:
                return -1  # freed while we waited for room
            return self.store.begin_restore(entry)

        offset = await self._with_room(oid, size, attempt)
        if offset < 0:
            return
        path = entry.spill_path
        ok = False
        started = time.monotonic()
        try:
            await asyncio.get_running_loop().run_in_executor(
                self._executor, self._read, path, offset, size
            )
            ok = True
        finally:
            self._io["read_seconds"] += time.monotonic() - started
            self.store.finish_restore(entry, ok)

    def _read(self, path: str, offset: int, size: int) -> None:
        assert self.files is not None
        view = self._arena().writable_view(offset, size)
        try:
            self.files.read_into(path, view)
        finally:
            view.release()

    # -- files -----------------------------------------------------------------------------
    def _file_freed(self, path: str, size: int) -> None:
        """The store deleted a spilled object: its file goes (off the loop)."""
        self._remove_file(path, size)

    def _remove_file(self, path: str, size: int) -> None:
        assert self.files is not None
        try:
            self._executor.submit(self.files.remove, path, size)
        except RuntimeError:  # shut down: we are stopping
            self.files.remove(path, size)

    def stats(self) -> dict[str, Any]:
        files = self.files
        return {
            "enabled": files is not None,
            "directory": files.directory if files is not None else "",
            "max_bytes": files.max_bytes if files is not None else 0,
            "bytes_on_disk": files.bytes_used if files is not None else 0,
            "threshold": self.threshold,
            "last_error": self.last_error,
            "spilling_now": self._in_flight,
            "restoring_now": len(self._restores),
            **self._io,
        }

    def close(self) -> None:
        """Waits for the spill threads, then deletes every spill file (nothing can read them
        once the raylet is gone)."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        if self.files is not None:
            self.files.remove_all()
