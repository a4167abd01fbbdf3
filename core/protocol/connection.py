"""The wire's front door, what the rest of Ember imports (``from ember.protocol import
connection as conn_mod``): the ``Connection`` (``stream``), ``connect`` and ``serve`` by
address scheme (``transports``, with ``inproc:`` registered here), and the frame kinds and
errors they raise. One name per thing; each lives in the module of its concept:

- ``codec``: frames to and from bytes, the token handshake, with no I/O;
- ``stream``: the asyncio ``Connection`` over any transport;
- ``transports``: ``unix:``, ``tcp:`` and the registry; ``inproc``: the in-memory pair;
- ``errors``: how a handler's exception reaches its caller.
"""

from __future__ import annotations

from ember.protocol import inproc  # registers inproc: with the transports
from ember.protocol.codec import AUTH_OK, AUTH_REFUSED, ERROR, ONEWAY, REPLY, REQUEST
from ember.protocol.errors import AuthenticationError, ConnectionClosedError, RemoteError
from ember.protocol.stream import (
    DEFERRED,
    Connection,
    Deferred,
    Handler,
    Handlers,
    new_event_loop,
)
from ember.protocol.transports import (
    cluster_token,
    connect,
    parse_address,
    serve,
    set_cluster_token,
)

__all__ = [
    "AUTH_OK",
    "AUTH_REFUSED",
    "AuthenticationError",
    "Connection",
    "ConnectionClosedError",
    "DEFERRED",
    "Deferred",
    "ERROR",
    "Handler",
    "Handlers",
    "ONEWAY",
    "REPLY",
    "REQUEST",
    "RemoteError",
    "cluster_token",
    "connect",
    "inproc",
    "new_event_loop",
    "parse_address",
    "serve",
    "set_cluster_token",
]
