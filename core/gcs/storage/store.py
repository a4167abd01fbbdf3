"""The GCS's side of its storage: changes batched per event-loop turn, written in one go,
and a way for a reply to wait until what it acknowledges is durable.

Why per turn: creating an actor changes its record several times within a few
microseconds (registered, then placed), and a burst of ``create_actor`` requests read in
one turn all land in one transaction. A change is kept as a function that renders the
record's current bytes when the batch is written, so a record changed five times in a
turn is serialized once.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Protocol

logger = logging.getLogger("ember.gcs")

# The tables the GCS keeps: nodes, jobs, actors (with specs and restart counts; names are
# read back from them), placement groups, the key-value store (which also holds the
# dashboard's job records and anything the cluster's tools put there), and the cluster's
# own settings that must outlive the head (its token: ``gcs/cluster_record.py``), kept out of
# the KV so that no KV request reads them.
TABLES = ("nodes", "jobs", "actors", "placement_groups", "kv", "cluster")

# (table, key, value); a value of None deletes the key.
Change = tuple[str, bytes, bytes | None]


class Backend(Protocol):
    """Where the tables live. ``write`` applies a batch atomically and either returns when
    it is durable or returns an awaitable that completes then."""

    description: str

    async def load(self) -> dict[str, dict[bytes, bytes]]: ...

    def write(self, changes: list[Change]) -> Awaitable[None] | None: ...

    async def close(self) -> None: ...


class Store:
    """``put``/``delete``/``mark`` a record; ``durable()`` waits for every change made so
    far to be written. A write that fails ends the process (``on_failure``): the GCS must
    never acknowledge what it could not keep, and a GCS started again reads back only what
    was written."""

    def __init__(self, backend: Backend, on_failure: Callable[[BaseException], None] | None = None):
        self.backend = backend
        self.on_failure = on_failure or _exit_on_failure
        # {(table, key): bytes, None (delete) or a function rendering the record's bytes}
        self._batch: dict[tuple[str, bytes], bytes | None | Callable[[], bytes | None]] = {}
        self._batch_done: asyncio.Future | None = None  # resolved once _batch is durable
        self._in_flight: asyncio.Future | None = None  # the batch being written
        self._scheduled = False
        self.writes = 0  # batches written (tests, the benchmark's notes)

    async def load(self) -> dict[str, dict[bytes, bytes]]:
        tables = await self.backend.load()
        return {t: tables.get(t, {}) for t in TABLES}

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._change(table, key, value)

    def delete(self, table: str, key: bytes) -> None:
        self._change(table, key, None)

    def mark(self, table: str, key: bytes, render: Callable[[], bytes | None]) -> None:
        """The record changed: ``render()`` gives its bytes (None: delete it) when written."""
        self._change(table, key, render)

    def _change(self, table: str, key: bytes, value) -> None:
        self._batch[(table, key)] = value
        if not self._scheduled and self._in_flight is None:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    @property
    def pending(self) -> bool:
        return bool(self._batch) or self._in_flight is not None

    def durable(self) -> Awaitable[None]:
        """Completes when every change made so far is written."""
        if self._batch:
            if self._batch_done is None:
                self._batch_done = asyncio.get_running_loop().create_future()
            return asyncio.shield(self._batch_done)
        if self._in_flight is not None:
            return asyncio.shield(self._in_flight)
        return _done()

    def _flush(self) -> None:
        self._scheduled = False
        if not self._batch or self._in_flight is not None:
            return
        batch, self._batch = self._batch, {}
        done, self._batch_done = self._batch_done, None
        try:
            changes = [(t, k, v() if callable(v) else v) for (t, k), v in batch.items()]
            result = self.backend.write(changes)
        except BaseException as e:
            self._failed(e, done)
            return
        self.writes += 1
        if result is None or not inspect.isawaitable(result):
            self._finished(done)
            return
        task = asyncio.ensure_future(result)
        self._in_flight = task
        task.add_done_callback(lambda t: self._written(t, done))

    def _written(self, task: asyncio.Future, done: asyncio.Future | None) -> None:
        self._in_flight = None
        if task.cancelled() or task.exception() is not None:
            self._failed(task.exception() or asyncio.CancelledError(), done)
            return
        self._finished(done)
        if self._batch:  # changes made while this batch was being written
            self._flush()

    def _finished(self, done: asyncio.Future | None) -> None:
        if done is not None and not done.done():
            done.set_result(None)

    def _failed(self, error: BaseException, done: asyncio.Future | None) -> None:
        logger.critical(
            "the GCS could not write its tables to %s: %s", self.backend.description, error
        )
        if done is not None and not done.done():
            done.set_exception(RuntimeError(f"the GCS's storage failed: {error}"))
            done.exception()
        self.on_failure(error)

    async def flush_now(self) -> None:
        """Writes what is batched and waits for it (at a clean stop)."""
        self._flush()
        while self.pending:
            await self.durable()

    async def close(self) -> None:
        """Writes what is batched, then lets the backend go."""
        await self.flush_now()
        await self.backend.close()


async def _done() -> None:
    return None


def _exit_on_failure(error: BaseException) -> None:
    # The head's supervisor starts a new GCS, which reads back what was written.
    logging.shutdown()
    os._exit(3)
