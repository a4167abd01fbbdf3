"""Connections between core workers: owners, borrowers, leased workers and actors.

Every core worker listens on a socket (``CoreWorker.address``). A connection between two of
them is used in both directions (``hello`` names the caller), so the messages between two
processes stay in order whoever opened it: at most one connection per peer is kept, and
concurrent connects to the same peer share one attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ember.protocol import connection as conn_mod
from ember.protocol.connection import Connection


class Peers:
    def __init__(
        self,
        worker_id: bytes,
        handlers: dict[str, Callable[..., Any]],
        loop: asyncio.AbstractEventLoop,
        on_lost: Callable[[bytes], None],
    ) -> None:
        self.worker_id = worker_id
        self._handlers = handlers  # this process's ops, served on every connection
        self.loop = loop
        self._on_lost = on_lost  # called with a peer's worker id when its connection closes
        self.conns: dict[bytes, Connection] = {}  # {worker_id: connection either way}
        self._connecting: dict[bytes, asyncio.Future] = {}

    def h_hello(self, conn: Connection, body: dict) -> None:
        wid = body["worker_id"]
        conn.state["peer"] = wid
        self.conns.setdefault(wid, conn)

    def on_peer_closed(self, conn: Connection) -> None:
        wid = conn.state.get("peer")
        if wid is not None and self.conns.get(wid) is conn:
            del self.conns[wid]
            self._on_lost(wid)

    async def connect_to_worker(self, worker_id: bytes | None, address: str) -> Connection:
        if worker_id is not None:
            conn = self.conns.get(worker_id)
            if conn is not None and not conn.closed:
                return conn
            pending = self._connecting.get(worker_id)
            if pending is not None:
                return await asyncio.shield(pending)
        fut = self.loop.create_future()
        if worker_id is not None:
            self._connecting[worker_id] = fut
        try:
            conn = await conn_mod.connect(
                address, self._handlers, name=f"peer:{address}", on_close=self.on_peer_closed
            )
            conn.send("hello", {"worker_id": self.worker_id})
            if worker_id is not None:
                conn.state["peer"] = worker_id
                self.conns[worker_id] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved
            raise
        finally:
            if worker_id is not None:
                self._connecting.pop(worker_id, None)
