"""The agent's side of its stream to the dashboard: over gRPC to the head's hub from any other
node (reconnected with back-off, the hub's address looked up in the GCS KV when not given),
or, for the head's agent in the dashboard's own process, handed to the hub in-process as the
JSON a remote agent would send. Replies to the dashboard's requests go first, then the latest
metrics sample, then task-event batches, whose overflow is counted and reported, then the
node's log chunks (``log_shipper``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
from ember.agent import wire
from ember.protocol import connection as conn_mod

logger = logging.getLogger("ember.agent")


class DashboardStream:
    """The stream half of ``Agent`` (a mixin: the agent's buffers are its state)."""

    async def dashboard_loop(self) -> None:
        if self.hub is not None:
            await self._local_stream(self.hub)
            return
        backoff = 0.2
        while not self.stopping:
            address = self.args.dashboard_address or await self._lookup_dashboard()
            if not address:
                await asyncio.sleep(5.0)  # no dashboard (yet): look again, cheaply
                continue
            try:
                await self._stream(address)
                backoff = 0.2
            except Exception as e:
                logger.info("stream to the dashboard at %s ended: %s", address, e)
            if self.stopping:
                return  # a cancel may have been swallowed on the way (see sample_loop)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _stream(self, address: str) -> None:
        metadata = ((wire.TOKEN_KEY, self.token),) if self.token else None
        async with grpc.aio.insecure_channel(address, options=wire.CHANNEL_OPTIONS) as channel:
            call = channel.stream_stream(wire.METHOD)(metadata=metadata)
            await call.write(
                wire.encode({"type": "hello", "node_id": self.node_id, "info": self.info})
            )
            if self.latest_metrics:
                self.wakeup.set()
            reader = asyncio.ensure_future(self._read_requests(call))
            try:
                while not reader.done():
                    msg = self._next_message()
                    if msg is None:
                        self.wakeup.clear()
                        waiter = asyncio.ensure_future(self.wakeup.wait())
                        await asyncio.wait({waiter, reader}, return_when=asyncio.FIRST_COMPLETED)
                        waiter.cancel()
                        continue
                    try:
                        await call.write(wire.encode(msg))
                    except BaseException:
                        self._requeue(msg)
                        raise
                reader.result()
            finally:
                reader.cancel()

    async def _local_stream(self, hub: Any) -> None:
        """The head's agent, in the dashboard's process: each message goes to the hub as the
        JSON a remote agent would send (so both ingest the same thing), with no socket."""
        hello = wire.decode(
            wire.encode({"type": "hello", "node_id": self.node_id, "info": self.info})
        )
        link = hub.open_link(hello["node_id"], hello["info"])
        if self.latest_metrics:
            self.wakeup.set()
        try:
            while not self.stopping:
                while not link.outbox.empty():
                    asyncio.ensure_future(self.handle_request(link.outbox.get_nowait()))
                msg = self._next_message()
                if msg is None:
                    self.wakeup.clear()
                    waiter = asyncio.ensure_future(self.wakeup.wait())
                    request = asyncio.ensure_future(link.outbox.get())
                    await asyncio.wait({waiter, request}, return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                    if request.done():
                        asyncio.ensure_future(self.handle_request(request.result()))
                    else:
                        request.cancel()
                    continue
                try:
                    hub.ingest(link, as_received(msg))
                except Exception as e:  # one bad message must not end the stream
                    logger.warning(
                        "the dashboard could not ingest a %s message: %s", msg["type"], e
                    )
                await asyncio.sleep(0)  # a burst of task events must not starve the HTTP server
        finally:
            hub.close_link(link)

    def _next_message(self) -> dict[str, Any] | None:
        if self.replies:
            return self.replies.popleft()
        if self.latest_metrics is not None:
            msg, self.latest_metrics = self.latest_metrics, None
            return msg
        if self.events:
            msg = self.events.popleft()
            if msg["type"] == "task_events":
                self.buffered_events -= len(msg["events"])
                if self.events_dropped:
                    msg = dict(msg, dropped=msg["dropped"] + self.events_dropped)
                    self.events_dropped = 0
            return msg
        if self.log_chunks:
            return self.log_chunks.popleft()
        return None

    def _requeue(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "task_events":
            self.events.appendleft(msg)
            self.buffered_events += len(msg["events"])
        elif msg["type"] == "log_chunk":
            self.log_chunks.appendleft(msg)

    async def _read_requests(self, call: Any) -> None:
        async for raw in call:
            msg = wire.decode(raw)
            if msg.get("type") == "request":
                asyncio.ensure_future(self.handle_request(msg))

    async def _lookup_dashboard(self) -> str | None:
        """A worker node finds the head's dashboard in the GCS KV (``dashboard_agent_address``)."""
        if not self.args.gcs_address:
            return None
        try:
            gcs = await conn_mod.connect(
                self.args.gcs_address, name="gcs", token=self.token.encode() if self.token else None
            )
            try:
                value = await gcs.call(
                    "kv_get", {"namespace": "dashboard", "key": b"agent_address"}, timeout=5.0
                )
            finally:
                gcs.close()
            return value.decode() if value else None
        except Exception:
            return None


_PLAIN = frozenset({str, int, float, bool, type(None)})  # exact types: JSON keeps them as they are


class _NotPlain(Exception):
    pass


def as_received(msg: dict[str, Any]) -> dict[str, Any]:
    """``msg`` as the hub would decode it from the wire (``wire.decode(wire.encode(msg))``),
    for the head's agent, which hands its messages over in-process. Task-event batches, the
    bulk, are converted directly (ids as hex, lists for tuples): ~0.9 µs an event where the
    JSON round trip costs ~4.6 µs, on the dashboard's loop. A batch holding anything else
    (a profile span's user data) takes the round trip, which is the definition."""
    if msg["type"] == "task_events":
        try:
            return {**msg, "events": [_event_as_received(e) for e in msg["events"]]}
        except _NotPlain:
            pass
    return wire.decode(wire.encode(msg))


def _event_as_received(event: Any) -> list[Any]:
    tid, state, t, attempt, extra = event
    if extra:
        # Most values are plain already: only the others pay for a call.
        extra = {k: v if type(v) in _PLAIN else _plain(v) for k, v in extra.items()}
    return [tid, state, t, attempt, extra]


def _plain(v: Any, depth: int = 0) -> Any:
    """``v`` as JSON would give it back: tuples and lists as lists, bytes as hex, dicts with
    string keys, nested a few levels (a RUNNING event's ``log_at`` is a tuple, and sent a
    whole batch through the round trip at ~4x the cost); anything else is _NotPlain."""
    t = type(v)
    if t in _PLAIN:
        return v
    if t is bytes:
        return v.hex()
    if depth < 4:
        if t is tuple or t is list:
            return [_plain(x, depth + 1) for x in v]
        if t is dict and all(type(k) is str for k in v):
            return {k: _plain(x, depth + 1) for k, x in v.items()}
    raise _NotPlain
