"""Task events, from this process's bounded buffer to the node's agent (for the dashboard).

Every ``PERIOD`` seconds the I/O loop sends the events recorded since the last flush to the
agent's Unix socket (``sockets/agent``, op ``task_events``) in batches of at most ``BATCH``;
after ``QUIET_FLUSHES`` empty flushes it sleeps until the next event recorded wakes it.
The hot path is untouched: recording stays one ``deque.append``; the flusher finds what is
new by the identity of the last event it sent, so it keeps no per-event state. Sends are
one-way (no reply awaited): a slow or dead agent never stalls this process. While the agent
is away, events wait in the same bounded buffer (``config.task_events_buffer_size``). The
buffer counts every event that fell out (``events_dropped``), so ``events_dropped + len``
is how many were ever recorded; the next batch reports (``dropped``) how many fell out
before they were sent: only those are lost to the agent. A worker's RUNNING events wait
apart (``TaskEvents.starts``): each flush sends those of tasks still running, and a task that
ended before it needs none (its owner's end event says where and when it ran).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from typing import Any, Protocol

from ember.core_worker.task_events import TaskEvents
from ember.protocol import connection as conn_mod

logger = logging.getLogger(__name__)
PERIOD = float(os.environ.get("EMBER_TASK_EVENTS_FLUSH_SECONDS", "1.0"))
BATCH = 5_000
RETRY_SECONDS = 5.0
STOP_SECONDS = 3.0  # at exit, for the last batches to reach the agent
QUIET_FLUSHES = 3  # empty flushes in a row after which the exporter sleeps until an event


class EventExporterHost(Protocol):
    """What the exporter needs of the core worker."""

    node: dict[str, Any]
    job_id: bytes
    worker_id: bytes
    shutting_down: bool


class EventExporter:
    def __init__(self, host: EventExporterHost, events: TaskEvents) -> None:
        self.host = host
        self.events = events
        self.address = "unix:" + os.path.join(host.node["session_dir"], "sockets", "agent")
        self.conn: Any = None
        self.last: tuple | None = None  # the newest event already sent
        self.sent_upto = 0  # how many of the events ever recorded were sent or lost
        self.reported_dropped = 0  # events lost before sending, all batches so far
        self._next_connect = 0.0
        self._failures = 0  # connection attempts failed in a row
        self.task: asyncio.Future | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        quiet = 0  # flushes in a row that found nothing new
        while not self.host.shutting_down:
            if quiet < QUIET_FLUSHES:
                await asyncio.sleep(PERIOD)
            else:
                # Nothing for a while (an idle actor): sleep until the next event rather
                # than wake every PERIOD; thousands of idle actors each woke once a second.
                woken = asyncio.Event()
                self.events.wake = functools.partial(loop.call_soon_threadsafe, woken.set)
                try:
                    # None slipped in before the hook was set.
                    if not self.new_events()[0] and not self.events.starts:
                        await woken.wait()
                finally:
                    self.events.wake = None
                await asyncio.sleep(PERIOD)  # gather the burst that woke us, as before
            try:
                new = await self.flush()
            except Exception:
                logger.debug("task event flush failed", exc_info=True)
                new = True
            quiet = 0 if new else quiet + 1

    def new_events(self) -> tuple[list[tuple], int, int]:
        """(events not sent yet, how many fell out of the buffer unsent, events recorded)."""
        buffer = self.events
        events = buffer.buffer
        if not events or events[-1] is self.last:
            return [], 0, 0
        for _ in range(3):
            # The user thread may append meanwhile: a copy with the drop count unchanged
            # around it is consistent with that count.
            dropped = buffer.dropped
            try:
                snapshot = list(events)
            except RuntimeError:
                continue
            if buffer.dropped == dropped:
                break
        else:
            return [], 0, 0
        recorded = dropped + len(snapshot)
        oldest = recorded - len(snapshot)  # the ordinal of snapshot[0] among all recorded
        if self.last is not None:
            for i in range(len(snapshot) - 1, -1, -1):
                if snapshot[i] is self.last:
                    return snapshot[i + 1 :], 0, recorded
        # The last one sent fell out too (or none was sent): every kept event is new, and
        # those recorded between the last sent and the oldest kept are lost.
        return snapshot, max(0, oldest - self.sent_upto), recorded

    async def flush(self) -> bool:
        """Sends what is new; whether there was anything (sent or kept for later)."""
        new, lost, recorded = self.new_events()
        if not new and not self.events.starts:
            return False
        conn = await self._connection()
        if conn is None:
            return True  # the agent is away; the events stay in the bounded buffer
        host = self.host
        # The RUNNING events of tasks still running now (``TaskEvents.record_start``).
        batch = new + self.events.take_starts() if self.events.starts else new
        for i in range(0, len(batch), BATCH):
            chunk = batch[i : i + BATCH]
            conn.send(
                "task_events",
                {
                    "job_id": host.job_id,
                    "worker_id": host.worker_id,
                    "events": chunk,
                    "dropped": lost if i == 0 else 0,
                },
            )
        if new:
            self.reported_dropped += lost
            self.sent_upto = recorded
            self.last = new[-1]
        return True

    async def _connection(self) -> Any:
        if self.conn is not None and not self.conn.closed:
            return self.conn
        loop = asyncio.get_running_loop()
        if loop.time() < self._next_connect:
            return None
        try:
            self.conn = await conn_mod.connect(self.address, name="agent", timeout=2.0)
            self._failures = 0
        except (OSError, TimeoutError):
            # Soon at first (an agent starting beside a new node is up within a second or
            # two), then every RETRY_SECONDS (an agent that died costs a connect attempt).
            self._failures += 1
            delay = min(RETRY_SECONDS, 0.25 * 2**self._failures)
            self._next_connect = loop.time() + delay
            self.conn = None
        return self.conn

    async def _last_flush(self) -> None:
        await self.flush()
        conn = self.conn
        if conn is not None and not conn.closed and self.last is not None:
            await conn.call("task_events_sync", None)

    def start(self) -> None:
        self.task = asyncio.ensure_future(self.run())

    async def stop(self) -> None:
        """On the I/O loop: a last flush, acknowledged by the agent (an exiting process
        would lose what is still in its socket's buffer), then the flusher and its
        connection end."""
        if self.task is not None:
            self.task.cancel()
        try:
            await asyncio.wait_for(self._last_flush(), STOP_SECONDS)
        except Exception as e:
            logger.warning("task events not all sent to the agent at exit: %r", e)
        if self.conn is not None and not self.conn.closed:
            self.conn.close()
        if self.task is not None:
            try:
                await self.task
            except asyncio.CancelledError:
                pass
