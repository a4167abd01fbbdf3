"""``inproc:name``: two Connections joined in memory, for tests that want the real framing
and dispatch without sockets, processes or ports.

Each end's writes are delivered to the other end's ``data_received`` on a later turn of the
event loop, in order, as a socket would; closing one end closes the other once what was
written before has been delivered. Both ends must share one event loop. No token is asked
for: an in-process peer is this process.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ember.protocol.transports import ConnectionFactory, register_transport

if TYPE_CHECKING:
    from ember.protocol.stream import Connection

_listeners: dict[str, InprocServer] = {}


class InprocTransport(asyncio.Transport):
    """One end of an in-memory pipe; ``peer`` is the other end's protocol."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        super().__init__()
        self._loop = loop
        self._name = name
        self._protocol: asyncio.Protocol | None = None
        self._other: InprocTransport | None = None
        self._closing = False
        self._lost = False

    # -- what Connection uses --------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._other is None:
            return
        self._loop.call_soon(self._other._deliver, bytes(data))

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        # After the writes already scheduled: the peer reads everything sent before the close.
        self._loop.call_soon(self._lose)
        if self._other is not None:
            self._loop.call_soon(self._other._peer_closed)

    def is_closing(self) -> bool:
        return self._closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in ("peername", "sockname"):
            return f"inproc:{self._name}"
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def abort(self) -> None:
        self.close()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol  # type: ignore[return-value]

    # -- the other end's side --------------------------------------------------------------
    def _deliver(self, data: bytes) -> None:
        if not self._lost:
            self._protocol.data_received(data)

    def _peer_closed(self) -> None:
        self._closing = True
        self._lose()

    def _lose(self) -> None:
        if not self._lost:
            self._lost = True
            self._protocol.connection_lost(None)


class InprocServer:
    """A listener under a name; ``close`` frees the name (open connections stay open, as a
    socket server's do)."""

    def __init__(self, name: str, factory: ConnectionFactory, loop: asyncio.AbstractEventLoop):
        self.name = name
        self.factory = factory
        self.loop = loop
        self.sockets: tuple = ()

    def close(self) -> None:
        if _listeners.get(self.name) is self:
            del _listeners[self.name]

    def is_serving(self) -> bool:
        return _listeners.get(self.name) is self

    async def wait_closed(self) -> None:
        return None


def pair(
    client: Connection, server: Connection, name: str = "pair"
) -> tuple[Connection, Connection]:
    """Joins two Connections made by the caller; call on a running loop."""
    loop = asyncio.get_running_loop()
    a, b = InprocTransport(loop, name), InprocTransport(loop, name)
    a._other, b._other = b, a
    a.set_protocol(client)
    b.set_protocol(server)
    server.connection_made(b)
    client.connection_made(a)
    return client, server


class InprocBackend:
    needs_token = False

    async def open(self, target: str, factory: ConnectionFactory, timeout: float) -> Connection:
        listener = _listeners.get(target)
        if listener is None:
            raise ConnectionRefusedError(f"nothing listens on inproc:{target}")
        if listener.loop is not asyncio.get_running_loop():
            raise RuntimeError(f"inproc:{target} listens on another event loop")
        client, _ = pair(factory(), listener.factory(), target)
        return client

    async def listen(self, target: str, factory: ConnectionFactory) -> tuple[InprocServer, str]:
        if target in _listeners:
            raise OSError(f"inproc:{target} is already in use")
        server = InprocServer(target, factory, asyncio.get_running_loop())
        _listeners[target] = server
        return server, target

    def format(self, target: str) -> str:
        return f"inproc:{target}"


register_transport("inproc", InprocBackend(), lambda rest: rest)
