"""A process's connection to the GCS that outlives one GCS process.

The head's raylet starts the GCS again when it dies (``raylet/gcs_supervisor.py``) and the
new one reads its tables back from storage. Every process that talks to the GCS (raylets,
agents' hosts, workers, drivers, the dashboard's job driver) holds a ``GcsLink`` instead of
a bare ``Connection``: when the connection drops, the link connects again, every
``reconnect_interval`` seconds, until ``reconnect_timeout`` (``config.gcs_reconnect_timeout``,
60 s by default, as Ray's) has passed.

Meanwhile:
- ``call`` waits for the new connection (within its own timeout) and then sends; a call in
  flight when the connection dropped is sent again once connected. The GCS's handlers
  accept a repeated request (``create_actor`` with a known id, ``register_node`` of a node it
  knows...), since the first may have been stored before its reply was lost;
- ``send`` queues the message (at most ``MAX_QUEUED``; the oldest are dropped, and counted)
  and sends the queue once reconnected;
- ``closed`` stays False: callers that skip a closed GCS keep sending to the link.

Once connected again, ``on_reconnect(conn)`` runs first (a raylet registers its node again,
a driver its job, a core worker its actor subscriptions), then the queued messages go out.
Past the timeout ``on_lost(reason)`` runs once and the link is closed for good: calls fail
at once with ``ConnectionClosedError`` naming the GCS and how long it was tried.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ember import config
from ember.protocol import connection as conn_mod
from ember.protocol.connection import Connection, ConnectionClosedError, Handlers

logger = logging.getLogger("ember")

MAX_QUEUED = 10_000  # one-way messages kept while disconnected
RECONNECT_INTERVAL = 0.2  # seconds between attempts: a restarted GCS is up within ~1 s


class GcsLink:
    def __init__(
        self,
        address: str,
        handlers: Handlers,
        *,
        name: str = "gcs",
        reconnect_timeout: float | None = None,
        on_reconnect: Callable[[Connection], Awaitable[None]] | None = None,
        on_disconnect: Callable[[str], None] | None = None,
        on_lost: Callable[[str], None] | None = None,
        quiet: bool = False,
    ) -> None:
        """``quiet``: say the outage at INFO (a worker's warnings echo to its driver, which
        says it once itself)."""
        self.address = address
        self.handlers = handlers
        self.name = name
        self.reconnect_timeout = (
            config.gcs_reconnect_timeout if reconnect_timeout is None else reconnect_timeout
        )
        self.on_reconnect = on_reconnect
        self.on_disconnect = on_disconnect
        self.on_lost = on_lost
        self._say = logger.info if quiet else logger.warning
        self.conn: Connection | None = None
        self.closed = False  # for good: given up, or closed by its owner
        self.close_reason = ""
        self.loop: asyncio.AbstractEventLoop | None = None
        self._up: asyncio.Event | None = None  # set while connected
        self._queue: collections.deque[tuple[str, Any]] = collections.deque(maxlen=MAX_QUEUED)
        self.dropped = 0  # queued messages dropped for the bound
        self.reconnects = 0
        self._reconnecting: asyncio.Task | None = None

    # -- connecting ------------------------------------------------------------------------
    async def connect(self, timeout: float = config.process_start_timeout) -> None:
        """The first connection: retried until ``timeout`` while the GCS starts."""
        self.loop = asyncio.get_running_loop()
        self._up = asyncio.Event()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._attach(await self._open())
                return
            except conn_mod.AuthenticationError:
                raise
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def _open(self) -> Connection:
        return await conn_mod.connect(
            self.address, self.handlers, name=self.name, on_close=self._dropped
        )

    def _attach(self, conn: Connection) -> None:
        self.conn = conn
        assert self._up is not None
        self._up.set()

    def _dropped(self, conn: Connection) -> None:
        if conn is not self.conn or self.closed:
            return
        if self._reconnecting is not None and not self._reconnecting.done():
            return  # a connection made while reconnecting dropped: that loop tries again
        assert self._up is not None
        self._up.clear()
        why = conn.close_reason
        self._say(
            "lost the connection to the GCS at %s (%s); reconnecting for up to %g s",
            self.address,
            why,
            self.reconnect_timeout,
        )
        if self.on_disconnect is not None:
            self.on_disconnect(why)
        self._reconnecting = asyncio.ensure_future(self._reconnect(why))

    async def _reconnect(self, why: str) -> None:
        deadline = time.monotonic() + self.reconnect_timeout
        while not self.closed:
            if time.monotonic() > deadline:
                self._give_up(
                    f"could not reconnect to the GCS at {self.address} within "
                    f"{self.reconnect_timeout:g} s (it went away: {why})"
                )
                return
            try:
                conn = await self._open()
            except conn_mod.AuthenticationError as e:
                self._give_up(f"the GCS refused this process's token: {e}")
                return
            except (OSError, TimeoutError):
                await asyncio.sleep(RECONNECT_INTERVAL)
                continue
            self.conn = conn
            try:
                if self.on_reconnect is not None:
                    await asyncio.wait_for(self.on_reconnect(conn), config.gcs_rpc_timeout)
            except Exception as e:
                if conn.closed:  # the new GCS went away too: try again
                    continue
                logger.exception("after reconnecting to the GCS: %s", e)
            if conn.closed:
                continue
            self.reconnects += 1
            self._say("reconnected to the GCS at %s", self.address)
            assert self._up is not None
            self._up.set()
            queued, self._queue = self._queue, collections.deque(maxlen=MAX_QUEUED)
            for op, body in queued:
                conn.send(op, body)
            return

    def _give_up(self, reason: str) -> None:
        (logger.error if self._say is logger.warning else self._say)("%s", reason)
        self.closed = True
        self.close_reason = reason
        if self._up is not None:
            self._up.set()  # wakes waiting calls, which now fail
        if self.on_lost is not None:
            self.on_lost(reason)

    # -- what callers use ------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        """Connected and, after a reconnection, past ``on_reconnect``."""
        conn = self.conn
        up = self._up is not None and self._up.is_set()
        return not self.closed and up and conn is not None and not conn.closed

    @property
    def state(self) -> dict:
        return self.conn.state if self.conn is not None else {}

    def _closed_error(self) -> ConnectionClosedError:
        return ConnectionClosedError(f"connection {self.name} is closed: {self.close_reason}")

    async def wait_connected(self, timeout: float | None = None) -> Connection:
        """The live connection, waiting for a reconnection (at most ``timeout``)."""
        while True:
            if self.closed:
                raise self._closed_error()
            if self.connected:
                assert self.conn is not None
                return self.conn
            assert self._up is not None
            await asyncio.wait_for(self._up.wait(), timeout)

    async def call(self, op: Any, body: Any = None, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            conn = await self.wait_connected(left)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await conn.call(op, body, left)
            except ConnectionClosedError:
                if self.closed:
                    raise
                # The GCS went away with the request: send it again to the next one.

    def request(self, op: Any, body: Any = None) -> asyncio.Future:
        assert self.loop is not None
        return asyncio.ensure_future(self.call(op, body), loop=self.loop)

    def send(self, op: Any, body: Any = None) -> None:
        if self.closed:
            return
        if self.connected:
            assert self.conn is not None
            self.conn.send(op, body)
            return
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
        self._queue.append((op, body))

    def send_threadsafe(self, op: Any, body: Any = None) -> None:
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self.send, op, body)

    def close(self, reason: str = "closed locally") -> None:
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        if self._up is not None:
            self._up.set()
        if self.conn is not None:
            self.conn.close(reason)
