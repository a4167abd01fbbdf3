"""Task events, from this process's bounded buffer to the node's agent (issue 4 §1).

Every ``PERIOD`` seconds the I/O loop sends the events recorded since the last flush to the
agent's Unix socket (``sockets/agent``, op ``task_events``) in batches of at most ``BATCH``.
The hot path is untouched: recording stays one ``deque.append``; the flusher finds what is
new by the identity of the last event it sent, so it keeps no per-event state. Sends are
one-way (no reply awaited): a slow or dead agent never stalls this process. While the agent
is away, events wait in the same bounded buffer (``config.task_events_buffer_size``); what
the buffer dropped is counted in ``events_dropped`` and reported with the next batch.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from ember.protocol import connection as conn_mod

logger = logging.getLogger(__name__)
PERIOD = float(os.environ.get("EMBER_TASK_EVENTS_FLUSH_SECONDS", "1.0"))
BATCH = 5_000
RETRY_SECONDS = 5.0


class EventExporter:
    def __init__(self, cw: Any) -> None:
        self.cw = cw
        self.address = "unix:" + os.path.join(cw.node["session_dir"], "sockets", "agent")
        self.conn: Any = None
        self.last: tuple | None = None  # the newest event already sent
        self.reported_dropped = 0
        self.unseen = 0  # events evicted from the buffer before this flusher saw them
        self._next_connect = 0.0
        self.task: asyncio.Future | None = None

    async def run(self) -> None:
        while not self.cw.shutting_down:
            await asyncio.sleep(PERIOD)
            try:
                await self.flush()
            except Exception:
                logger.debug("task event flush failed", exc_info=True)

    def new_events(self) -> list[tuple]:
        events = self.cw.events
        if not events or events[-1] is self.last:
            return []
        for _ in range(3):
            try:
                snapshot = list(events)  # the user thread may append meanwhile
                break
            except RuntimeError:
                continue
        else:
            return []
        start = 0
        if self.last is not None:
            for i in range(len(snapshot) - 1, -1, -1):
                if snapshot[i] is self.last:
                    start = i + 1
                    break
            else:
                # The last one sent was evicted: everything kept is new, some were lost.
                self.unseen += 1
        return snapshot[start:]

    async def flush(self) -> None:
        new = self.new_events()
        if not new:
            return
        conn = await self._connection()
        if conn is None:
            return  # the agent is away; the events stay in the bounded buffer
        cw = self.cw
        dropped = cw.events_dropped + self.unseen - self.reported_dropped
        for i in range(0, len(new), BATCH):
            chunk = new[i : i + BATCH]
            conn.send(
                "task_events",
                {
                    "job_id": cw.job_id,
                    "worker_id": cw.worker_id,
                    "events": chunk,
                    "dropped": dropped if i == 0 else 0,
                },
            )
        self.reported_dropped += dropped
        self.last = new[-1]

    async def _connection(self) -> Any:
        if self.conn is not None and not self.conn.closed:
            return self.conn
        loop = asyncio.get_running_loop()
        if loop.time() < self._next_connect:
            return None
        try:
            self.conn = await conn_mod.connect(self.address, name="agent", timeout=2.0)
        except (OSError, TimeoutError):
            self._next_connect = loop.time() + RETRY_SECONDS
            self.conn = None
        return self.conn

    def start(self) -> None:
        self.task = asyncio.ensure_future(self.run())

    async def stop(self) -> None:
        """On the I/O loop: a last flush, then the flusher and its connection end."""
        if self.task is not None:
            self.task.cancel()
        try:
            await asyncio.wait_for(self.flush(), 2.0)
        except Exception:
            pass
        if self.conn is not None and not self.conn.closed:
            self.conn.close()
        if self.task is not None:
            try:
                await self.task
            except asyncio.CancelledError:
                pass
