"""``ember.gcs_link.GcsLink`` against a small server on a Unix socket that goes away and
comes back: calls wait and are sent again, one-way messages queue (bounded, drops counted)
and go out after ``on_reconnect``, and past the timeout the link gives up once, saying why."""

from __future__ import annotations

import asyncio
import os

import pytest
from ember import gcs_link
from ember.gcs_link import GcsLink
from ember.protocol import connection as conn_mod


class Server:
    """Answers ``kv_get`` with its body (an echo); records what arrives, in order: one-way
    ``subscribe_actor`` bodies, ``kv_get`` and ``register_node`` (the reconnect hook's)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.seen: list[tuple[str, object]] = []
        self.server = None
        self.conns: list = []

    async def start(self) -> None:
        handlers = {
            "kv_get": lambda c, b: self.seen.append(("echo", b)) or b,
            "subscribe_actor": lambda c, b: self.seen.append(("note", b)),
            "register_node": lambda c, b: self.seen.append(("hello", b)) or "hi",
        }
        self.server, _ = await conn_mod.serve(
            self.address, handlers, name="fake-gcs", on_connect=self.conns.append
        )

    def kill(self) -> None:
        self.server.close()
        for c in self.conns:
            c.close("killed")
        self.conns.clear()


def test_calls_wait_for_the_gcs_to_come_back_and_messages_follow_the_reconnect(tmp_path):
    async def main() -> None:
        address = "unix:" + os.path.join(tmp_path, "gcs")
        server = Server(address)
        await server.start()

        async def hello(conn) -> None:
            assert await conn.call("register_node", "again", timeout=5) == "hi"

        link = GcsLink(address, {}, reconnect_timeout=10, on_reconnect=hello)
        await link.connect(5)
        assert await link.call("kv_get", 1, timeout=5) == 1
        server.kill()
        await asyncio.sleep(0.05)
        assert not link.connected and not link.closed
        link.send("subscribe_actor", "queued")
        pending = asyncio.ensure_future(link.call("kv_get", 2, timeout=10))
        await asyncio.sleep(0.3)
        assert not pending.done()  # waits: the GCS is away, not gone
        await server.start()
        assert await asyncio.wait_for(pending, 10) == 2
        # The reconnect hook ran first, then the queued message, then the waiting call.
        assert server.seen[1:] == [("hello", "again"), ("note", "queued"), ("echo", 2)]
        assert link.reconnects == 1
        link.close()
        server.kill()

    asyncio.run(main())


def test_past_the_timeout_the_link_gives_up_once_saying_why(tmp_path):
    async def main() -> None:
        address = "unix:" + os.path.join(tmp_path, "gcs")
        server = Server(address)
        await server.start()
        lost: list[str] = []
        link = GcsLink(address, {}, reconnect_timeout=0.5, on_lost=lost.append)
        await link.connect(5)
        server.kill()
        waiting = asyncio.ensure_future(link.call("kv_get", 1))  # no deadline of its own
        with pytest.raises(conn_mod.ConnectionClosedError, match="within 0.5 s"):
            await asyncio.wait_for(waiting, 10)
        assert len(lost) == 1 and "could not reconnect to the GCS" in lost[0]
        assert link.closed
        with pytest.raises(conn_mod.ConnectionClosedError):
            await asyncio.wait_for(link.call("kv_get", 2), 1)

    asyncio.run(main())


def test_the_queue_while_away_is_bounded_and_counts_its_drops(tmp_path, monkeypatch):
    monkeypatch.setattr(gcs_link, "MAX_QUEUED", 3)

    async def main() -> None:
        address = "unix:" + os.path.join(tmp_path, "gcs")
        server = Server(address)
        await server.start()
        link = GcsLink(address, {}, reconnect_timeout=10)
        await link.connect(5)
        server.kill()
        await asyncio.sleep(0.05)
        for i in range(5):
            link.send("subscribe_actor", i)
        assert link.dropped == 2
        await server.start()
        await asyncio.wait_for(link.wait_connected(), 10)
        await link.call("kv_get", "last", timeout=5)
        assert server.seen[-4:] == [("note", 2), ("note", 3), ("note", 4), ("echo", "last")]
        link.close()
        server.kill()

    asyncio.run(main())
