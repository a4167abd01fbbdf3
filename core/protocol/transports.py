"""Where a connection goes: a registry of transport backends chosen by the address's scheme.

- ``unix:/path``: a Unix socket. Reachable only on this host, guarded by the socket file's
  mode (0600), so no token is asked for.
- ``tcp:host:port`` (or ``tcp://host:port``): TCP. Reachable from other hosts, so every
  connection presents the cluster token first and every listener demands it; a process
  joins one cluster, so its token is set once (``set_cluster_token``). A listener on a node
  IP also listens on loopback at the same port, with the same token
  (``ember.listen_rules``, which decides every listener's bind and token).
- ``inproc:name``: both ends in this process and event loop, joined in memory with no
  socket (``ember.protocol.inproc``): the same frames and dispatch, for tests.

``register_transport`` adds a backend; ``connect`` and ``serve`` look the scheme up.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any, Protocol

from ember.listen_rules import rule_for
from ember.protocol import preauth
from ember.protocol.errors import AuthenticationError
from ember.protocol.stream import Connection, Handlers

_cluster_token: bytes | None = None


def set_cluster_token(token: bytes | None) -> None:
    """The token this process presents to, and demands from, TCP peers."""
    global _cluster_token
    _cluster_token = token


def cluster_token() -> bytes | None:
    return _cluster_token


ConnectionFactory = Callable[[], "Connection"]


class Backend(Protocol):
    """One way of carrying frames. ``needs_token``: peers must present the cluster token."""

    needs_token: bool

    async def open(self, target: Any, factory: ConnectionFactory, timeout: float) -> Connection: ...

    async def listen(self, target: Any, factory: ConnectionFactory) -> tuple[Any, Any]:
        """Starts listening; returns the server (with ``close()``) and the bound target."""
        ...

    def format(self, target: Any) -> str:
        """The canonical address of a bound target."""
        ...


_backends: dict[str, Backend] = {}
_parsers: dict[str, Callable[[str], Any]] = {}


def register_transport(scheme: str, backend: Backend, parse: Callable[[str], Any]) -> None:
    """Makes ``scheme:rest`` addresses go through ``backend``; ``parse(rest)`` gives its
    target."""
    _backends[scheme] = backend
    _parsers[scheme] = parse


def parse_address(address: str) -> tuple[str, Any]:
    """``unix:/path``, ``tcp:host:port``, ``tcp://host:port`` or ``inproc:name`` →
    (scheme, target)."""
    scheme, _, rest = address.partition(":")
    parse = _parsers.get(scheme)
    if parse is None:
        known = ", ".join(f"{s}:..." for s in _parsers)
        raise ValueError(f"unknown address {address!r}: expected one of {known}")
    return scheme, parse(rest)


async def connect(
    address: str,
    handlers: Handlers | None = None,
    *,
    name: str = "",
    on_close: Callable[[Connection], None] | None = None,
    token: bytes | None = None,
    timeout: float = 10.0,
) -> Connection:
    """A connection to the listener at ``address``, its token check (if the transport needs
    one) passed."""
    scheme, target = parse_address(address)
    backend = _backends[scheme]

    def factory() -> Connection:
        return Connection(handlers or {}, name=name or address, on_close=on_close)

    conn = await backend.open(target, factory, timeout)
    if backend.needs_token:
        await _present_token(conn, address, token, timeout)
    return conn


async def _present_token(
    conn: Connection, address: str, token: bytes | None, timeout: float
) -> None:
    token = token if token is not None else _cluster_token
    if token is None:
        conn.close("no cluster token")
        raise AuthenticationError(
            f"connecting to {address} needs the cluster token: pass --token or set "
            "EMBER_TOKEN (it is in the head's <session_dir>/cluster_token; on the head's "
            "machine it is found automatically)"
        )
    try:
        await asyncio.wait_for(conn.send_token(token), timeout)
    except AuthenticationError as e:
        conn.close(str(e))
        raise AuthenticationError(
            f"{address} refused the cluster token ({e.args[0].rsplit(': ', 1)[-1]}): "
            "pass the head's token with --token or EMBER_TOKEN (it is in the head's "
            "temp dir, file cluster_token)"
        ) from None
    except BaseException:
        conn.close("token check failed")
        raise


async def serve(
    address: str,
    handlers: Handlers,
    *,
    name: str = "",
    on_connect: Callable[[Connection], None] | None = None,
    on_close: Callable[[Connection], None] | None = None,
    token: bytes | None = None,
) -> tuple[Any, str]:
    """Listens on ``address``; returns the server and the address it really bound (port 0).
    ``on_connect`` runs for each connection once it is the listener's: at once on a Unix
    socket, after its token was accepted on TCP."""
    scheme, target = parse_address(address)
    backend = _backends[scheme]
    expect: bytes | None = None
    if backend.needs_token:
        expect = token if token is not None else _cluster_token
        if expect is None:
            raise ValueError(
                f"refusing to listen on {address} without a cluster token: anything reachable "
                "from other hosts must require it"
            )

    def factory() -> Connection:
        if expect is None:
            conn = Connection(handlers, name=name, on_close=on_close)
            if on_connect is not None:
                on_connect(conn)
            return conn
        # A TCP peer is a stranger until its token is accepted: held to preauth's limits,
        # and not the listener's connection yet (the GCS sends news to every connection it
        # knows, which must not reach a peer without the token).
        return Connection(
            handlers,
            name=name,
            on_close=on_close,
            expect_token=expect,
            guard=preauth.GUARD,
            on_authenticated=on_connect,
        )

    server, bound = await backend.listen(target, factory)
    return server, backend.format(bound)


# -- the socket backends -------------------------------------------------------------------
TWIN_PORT_TRIES = 20


class _Servers:
    """Two listeners (node IP and loopback) that close together."""

    def __init__(self, *servers: Any) -> None:
        self.servers = servers
        self.sockets = [s for server in servers for s in server.sockets]

    def close(self) -> None:
        for server in self.servers:
            server.close()

    async def wait_closed(self) -> None:
        for server in self.servers:
            await server.wait_closed()


# Connections waiting to be accepted (the kernel caps it at net.core.somaxconn). asyncio's
# 100 refused connections when hundreds of workers started at once dialled the raylet and
# the GCS (a Unix socket whose backlog is full fails a non-blocking connect at once, EAGAIN).
LISTEN_BACKLOG = 1024


class UnixBackend:
    needs_token = False

    async def open(self, target: str, factory: ConnectionFactory, timeout: float) -> Connection:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(loop.create_unix_connection(factory, target), timeout)
        return conn

    async def listen(self, target: str, factory: ConnectionFactory) -> tuple[Any, str]:
        server = await asyncio.get_running_loop().create_unix_server(
            factory, target, backlog=LISTEN_BACKLOG
        )
        os.chmod(target, 0o600)  # the file's mode is this listener's only guard
        return server, target

    def format(self, target: str) -> str:
        return f"unix:{target}"


class TcpBackend:
    needs_token = True

    async def open(
        self, target: tuple[str, int], factory: ConnectionFactory, timeout: float
    ) -> Connection:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(loop.create_connection(factory, *target), timeout)
        return conn

    async def listen(
        self, target: tuple[str, int], factory: ConnectionFactory
    ) -> tuple[Any, tuple[str, int]]:
        loop = asyncio.get_running_loop()
        twin = rule_for(target[0], cluster=True).twin
        if twin is None:
            server = await loop.create_server(factory, *target, backlog=LISTEN_BACKLOG)
            return server, server.sockets[0].getsockname()[:2]
        # A port picked by the kernel for the node IP may be taken on loopback: pick again.
        tries = 1 if target[1] else TWIN_PORT_TRIES
        for attempt in range(tries):
            server = await loop.create_server(factory, *target, backlog=LISTEN_BACKLOG)
            bound = server.sockets[0].getsockname()[:2]
            try:
                twin_server = await loop.create_server(
                    factory, twin, bound[1], backlog=LISTEN_BACKLOG
                )
            except OSError as e:
                server.close()
                if attempt + 1 < tries:
                    continue
                raise OSError(
                    e.errno, f"{twin}:{bound[1]} (beside {bound[0]}:{bound[1]}) is taken: {e}"
                ) from None
            return _Servers(server, twin_server), bound
        raise AssertionError("unreachable")

    def format(self, target: tuple[str, int]) -> str:
        return f"tcp:{target[0]}:{target[1]}"


def _parse_tcp(rest: str) -> tuple[str, int]:
    host, _, port = rest.removeprefix("//").rpartition(":")
    return host, int(port)


register_transport("unix", UnixBackend(), lambda rest: rest)
register_transport("tcp", TcpBackend(), _parse_tcp)

__all__ = [
    "Backend",
    "TcpBackend",
    "UnixBackend",
    "cluster_token",
    "connect",
    "parse_address",
    "register_transport",
    "serve",
    "set_cluster_token",
]
