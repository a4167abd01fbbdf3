"""The hot-path transport: length-prefixed pickled messages over Unix or TCP sockets.

Rules:
- A frame is a 4-byte little-endian length and a pickled tuple.
- ``(REQUEST, op, req_id, body)`` expects ``(REPLY, req_id, result)`` or
  ``(ERROR, req_id, exception)``; ``(ONEWAY, op, body)`` expects nothing.
- Handlers are looked up by ``op`` in the table the connection was made with; a handler gets
  ``(conn, body)`` and returns the result or an awaitable of it.
- Messages on one connection are handled in the order they arrive (synchronous handlers run
  inline; an awaitable's reply goes out when it completes).
- Writes made in one event-loop iteration leave in one system call.
- A connection to a TCP listener must first send the cluster token as a raw frame, checked
  before anything it sends is unpickled; the listener answers ``__auth_ok__`` or
  ``__auth_refused__`` (then closes), so a client with a wrong token gets a clear error at
  ``connect`` instead of a closed socket later. A process joins one cluster, so its token is
  set once (``set_cluster_token``) and used by every TCP ``connect`` and ``serve``.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import itertools
import logging
import os
import pickle
import select
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

REQUEST, REPLY, ERROR, ONEWAY = 0, 1, 2, 3
_HEADER = struct.Struct("<I")
_MAX_FRAME = 1 << 31
_AUTH_MAGIC = b"EMBER-AUTH1"
_AUTH_OK = "__auth_ok__"
_AUTH_REFUSED = "__auth_refused__"
_cluster_token: bytes | None = None


def set_cluster_token(token: bytes | None) -> None:
    """The token this process presents to, and demands from, TCP peers."""
    global _cluster_token
    _cluster_token = token


def cluster_token() -> bytes | None:
    return _cluster_token


class AuthenticationError(ConnectionRefusedError):
    """The peer refused our cluster token (or we had none to give)."""


Handler = Callable[["Connection", Any], Any]
Handlers = dict[str, Handler]

_dumps = pickle.dumps
_loads = pickle.loads
_HIGHEST = pickle.HIGHEST_PROTOCOL


class ConnectionClosedError(ConnectionError):
    """The peer went away before answering."""


class RemoteError(Exception):
    """A handler failed on the other side with an error that could not travel as itself."""


class Connection(asyncio.Protocol):
    def __init__(
        self,
        handlers: Handlers,
        *,
        on_close: Callable[[Connection], None] | None = None,
        name: str = "",
        expect_token: bytes | None = None,
    ) -> None:
        self.handlers = handlers
        self.on_close = on_close
        self.name = name
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        self.close_reason = ""
        self.state: dict[str, Any] = {}  # per-connection facts a handler may keep
        self._buf = bytearray()
        self._out: list[bytes] = []
        self._flush_scheduled = False
        # {req_id: Future of the reply, or a callback(result, error)}
        self._pending: dict[int, asyncio.Future | Callable] = {}
        self._ids = itertools.count(1)  # next() on a C iterator: safe from any thread
        self._expect_token = expect_token
        self._current_rid = 0
        # Held around every socket write, so another thread may write directly (write_direct).
        self._wlock = threading.Lock()
        self._fd = -1
        self._auth_waiter: asyncio.Future | None = None  # client side of the token check

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.loop = asyncio.get_running_loop()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._fd = sock.fileno()
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:  # small request/reply messages must not wait for Nagle
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (n,) = _HEADER.unpack_from(buf, pos)
            if end - pos - 4 < n:
                break
            start = pos + 4
            pos = start + n
            if self._expect_token is not None:
                if not self._check_token(bytes(buf[start:pos])):
                    return
                continue
            try:
                msg = _loads(memoryview(buf)[start:pos])
            except Exception as e:  # a corrupt frame: nothing more on this stream is safe
                logger.error("%s: undecodable frame (%s); closing", self.name, e)
                self.close(f"undecodable frame: {e}")
                return
            self._dispatch(msg)
            if self.closed:
                return
        if pos:
            del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self._mark_closed(str(exc) if exc else "peer closed the connection")

    # -- sending ---------------------------------------------------------------------------
    def _write(self, payload: bytes) -> None:
        if self.closed:
            raise ConnectionClosedError(f"connection {self.name} is closed: {self.close_reason}")
        self._out.append(_HEADER.pack(len(payload)))
        self._out.append(payload)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        if not self._flush_scheduled:
            return
        self._flush_scheduled = False
        if self.closed or not self._out:
            self._out.clear()
            return
        # Emptying the queue under the lock keeps order with writers on other threads: they
        # only write when, holding the lock, they see nothing queued ahead of them.
        with self._wlock:
            out = self._out
            self._out = []
            self.transport.write(b"".join(out) if len(out) > 2 else out[0] + out[1])

    def write_direct(self, payload: bytes) -> bool:
        """From a thread other than the loop's: writes one frame straight to the socket when
        nothing is queued ahead of it (saves a wake-up of the loop). False: use the loop."""
        if self.closed or self._fd < 0 or self._out:
            return False
        frame = _HEADER.pack(len(payload)) + payload
        with self._wlock:
            if self.closed or self._out or self.transport.get_write_buffer_size():
                return False
            return self._write_frame_locked(frame)

    def _write_frame_locked(self, frame: bytes) -> bool:
        """Writes a whole frame with ``os.write``, holding ``_wlock``. False only when nothing
        was written (the peer is gone); a frame torn later is the peer's loss, not a retry."""
        view = memoryview(frame)
        while view:
            try:
                n = os.write(self._fd, view)
            except BlockingIOError:
                n = 0
            except OSError:
                return len(view) < len(frame)
            view = view[n:]
            if view:  # the socket buffer is full: wait (bounded) rather than tear it
                if not select.select([], [self._fd], [], 5.0)[1]:
                    self.loop.call_soon_threadsafe(self.close, "peer stopped reading")
                    return True
        return True

    def send(self, op: str, body: Any = None) -> None:
        """A one-way message. Call on the connection's loop."""
        self._write(_dumps((ONEWAY, op, body), _HIGHEST))

    def request(self, op: str, body: Any = None) -> asyncio.Future:
        """A request; the future gets the reply. Call on the connection's loop."""
        fut = self.loop.create_future()
        if self.closed:
            fut.set_exception(
                ConnectionClosedError(f"connection {self.name} is closed: {self.close_reason}")
            )
            return fut
        rid = next(self._ids)
        self._pending[rid] = fut
        self._write(_dumps((REQUEST, op, rid, body), _HIGHEST))
        return fut

    def request_cb(
        self, op: str, body: Any, callback: Callable[[Any, BaseException | None], None]
    ) -> None:
        """A request whose reply runs ``callback(result, error)`` as soon as it is read.

        Cheaper than ``request`` on the hot path: no Future, no extra loop iteration.
        """
        if self.closed:
            callback(
                None,
                ConnectionClosedError(f"connection {self.name} is closed: {self.close_reason}"),
            )
            return
        rid = next(self._ids)
        self._pending[rid] = callback
        self._write(_dumps((REQUEST, op, rid, body), _HIGHEST))

    def request_cb_direct(
        self, op: str, body: Any, callback: Callable[[Any, BaseException | None], None]
    ) -> bool:
        """``request_cb`` from a thread other than the loop's, written straight to the socket
        (saves waking the loop). False, having sent nothing: use the loop instead.

        The callback runs on the loop, like ``request_cb``'s. Registering it under the write
        lock, which ``_mark_closed`` also takes, means a closing connection either fails it
        or never sees it, so it can't be lost.
        """
        if self.closed or self._fd < 0 or self._out:
            return False
        rid = next(self._ids)
        payload = _dumps((REQUEST, op, rid, body), _HIGHEST)
        frame = _HEADER.pack(len(payload)) + payload
        with self._wlock:
            if self.closed or self._out or self.transport.get_write_buffer_size():
                return False
            self._pending[rid] = callback
            if not self._write_frame_locked(frame):
                self._pending.pop(rid, None)
                return False
        return True

    def deferred(self) -> Deferred:
        """Inside a request handler: a handle to answer this request later, from any thread."""
        return Deferred(self, self._current_rid)

    async def call(self, op: str, body: Any = None, timeout: float | None = None) -> Any:
        fut = self.request(op, body)
        if timeout is None:
            return await fut
        return await asyncio.wait_for(fut, timeout)

    def send_threadsafe(self, op: str, body: Any = None) -> None:
        self.loop.call_soon_threadsafe(self._send_quiet, op, body)

    def _send_quiet(self, op: str, body: Any) -> None:
        if not self.closed:
            self.send(op, body)

    def close(self, reason: str = "closed locally") -> None:
        if self.transport is not None and not self.closed:
            self._flush()
            self.transport.close()
        self._mark_closed(reason)

    # -- receiving -------------------------------------------------------------------------
    def _dispatch(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == REPLY:
            waiter = self._pending.pop(msg[1], None)
            if waiter is None:
                return
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    waiter.set_result(msg[2])
            else:
                waiter(msg[2], None)
        elif kind == REQUEST:
            op, rid, body = msg[1], msg[2], msg[3]
            handler = self.handlers.get(op)
            if handler is None:
                self._reply_error(rid, RemoteError(f"{self.name}: no handler for {op!r}"))
                return
            self._current_rid = rid
            try:
                result = handler(self, body)
            except Exception as e:
                self._reply_error(rid, e)
                return
            if result is DEFERRED:
                return
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                task.add_done_callback(lambda t, rid=rid: self._reply_from_task(rid, t))
            else:
                self._reply(rid, result)
        elif kind == ONEWAY:
            if self._auth_waiter is not None and msg[1] in (_AUTH_OK, _AUTH_REFUSED):
                self._auth_answer(msg[1], msg[2])
                return
            handler = self.handlers.get(msg[1])
            if handler is None:
                logger.warning("%s: no handler for one-way %r", self.name, msg[1])
                return
            try:
                result = handler(self, msg[2])
                if inspect.isawaitable(result):
                    asyncio.ensure_future(result).add_done_callback(_log_task_error)
            except Exception:
                logger.exception("%s: handler for %r failed", self.name, msg[1])
        elif kind == ERROR:
            waiter = self._pending.pop(msg[1], None)
            if waiter is None:
                return
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    waiter.set_exception(msg[2])
            else:
                waiter(None, msg[2])

    def _reply(self, rid: int, result: Any) -> None:
        if self.closed:
            return
        try:
            payload = _dumps((REPLY, rid, result), _HIGHEST)
        except Exception as e:
            self._reply_error(rid, e)
            return
        self._write(payload)

    def _reply_now(self, rid: int, result: Any) -> None:
        """A reply written without waiting for the next loop iteration's flush."""
        self._reply(rid, result)
        if self._flush_scheduled:
            self._flush()

    def _write_now(self, payload: bytes) -> None:
        if self.closed:
            return
        self._write(payload)
        self._flush()

    def _reply_error(self, rid: int, exc: BaseException) -> None:
        if self.closed:
            return
        try:
            payload = _dumps((ERROR, rid, exc), _HIGHEST)
        except Exception:
            payload = _dumps((ERROR, rid, RemoteError(f"{type(exc).__name__}: {exc}")), _HIGHEST)
        self._write(payload)

    def _reply_from_task(self, rid: int, task: asyncio.Task) -> None:
        if task.cancelled():
            self._reply_error(rid, RemoteError("the handler was cancelled"))
        elif task.exception() is not None:
            self._reply_error(rid, task.exception())
        else:
            self._reply(rid, task.result())

    def _mark_closed(self, reason: str) -> None:
        if self.closed:
            return
        with self._wlock:  # see request_cb_direct
            self.closed = True
            self.close_reason = reason
            pending, self._pending = self._pending, {}
        waiter, self._auth_waiter = self._auth_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(
                ConnectionClosedError(f"connection {self.name} closed before the token check")
            )
            waiter.exception()  # connect() may have stopped waiting: not worth a warning
        for waiter in pending.values():
            err = ConnectionClosedError(f"connection {self.name} closed: {reason}")
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    waiter.set_exception(err)
            else:
                try:
                    waiter(None, err)
                except Exception:
                    logger.exception("%s: reply callback failed on close", self.name)
        if self.on_close is not None:
            try:
                self.on_close(self)
            except Exception:
                logger.exception("%s: on_close failed", self.name)

    # -- authentication --------------------------------------------------------------------
    def _check_token(self, frame: bytes) -> bool:
        expected = _AUTH_MAGIC + self._expect_token
        if hmac.compare_digest(frame, expected):
            self._expect_token = None
            self.send(_AUTH_OK)
            return True
        peer = self.transport.get_extra_info("peername") if self.transport else None
        logger.warning(
            "%s: refused a connection from %s: wrong or missing cluster token", self.name, peer
        )
        reason = "wrong cluster token" if frame.startswith(_AUTH_MAGIC) else "no cluster token sent"
        # Said before closing, so the client can tell the user why; nothing else is read.
        self.transport.write(_frame(_dumps((ONEWAY, _AUTH_REFUSED, reason), _HIGHEST)))
        self.close(reason)
        return False

    def send_token(self, token: bytes) -> asyncio.Future:
        """Presents the token; the future resolves when the listener accepts it."""
        self._auth_waiter = self.loop.create_future()
        frame = _AUTH_MAGIC + token
        self.transport.write(_frame(frame))
        return self._auth_waiter

    def _auth_answer(self, op: str, body: Any) -> None:
        waiter, self._auth_waiter = self._auth_waiter, None
        if waiter is None or waiter.done():
            return
        if op == _AUTH_OK:
            waiter.set_result(True)
        else:
            waiter.set_exception(
                AuthenticationError(f"{self.name} refused this connection: {body}")
            )


def _frame(payload: bytes) -> bytes:
    return _HEADER.pack(len(payload)) + payload


DEFERRED = object()  # a handler's return value: "I will answer through conn.deferred()"


class Deferred:
    """Answers one request later, from any thread (the worker's executing thread)."""

    __slots__ = ("conn", "rid")

    def __init__(self, conn: Connection, rid: int) -> None:
        self.conn = conn
        self.rid = rid

    def resolve(self, value: Any) -> None:
        """On the connection's loop."""
        self.conn._reply(self.rid, value)

    def resolve_threadsafe(self, value: Any) -> None:
        conn = self.conn
        try:
            payload = _dumps((REPLY, self.rid, value), _HIGHEST)
        except Exception:
            conn.loop.call_soon_threadsafe(conn._reply_now, self.rid, value)  # error reply
            return
        if not conn.write_direct(payload):
            conn.loop.call_soon_threadsafe(conn._write_now, payload)


def _log_task_error(task: asyncio.Future) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("one-way handler failed", exc_info=task.exception())


def parse_address(address: str) -> tuple[str, Any]:
    """``unix:/path`` or ``tcp:host:port`` → (scheme, target)."""
    scheme, _, rest = address.partition(":")
    if scheme == "unix":
        return "unix", rest
    if scheme == "tcp":
        host, _, port = rest.rpartition(":")
        return "tcp", (host, int(port))
    raise ValueError(f"unknown address {address!r}: expected unix:/path or tcp:host:port")


async def connect(
    address: str,
    handlers: Handlers | None = None,
    *,
    name: str = "",
    on_close: Callable[[Connection], None] | None = None,
    token: bytes | None = None,
    timeout: float = 10.0,
) -> Connection:
    loop = asyncio.get_running_loop()
    scheme, target = parse_address(address)

    def factory() -> Connection:
        return Connection(handlers or {}, name=name or address, on_close=on_close)

    if scheme == "unix":
        coro = loop.create_unix_connection(factory, target)
    else:
        coro = loop.create_connection(factory, *target)
    _, conn = await asyncio.wait_for(coro, timeout)
    if scheme == "tcp":
        token = token if token is not None else _cluster_token
        if token is None:
            conn.close("no cluster token")
            raise AuthenticationError(
                f"connecting to {address} needs the cluster token: pass --token or set "
                "EMBER_TOKEN (on the head node it is found automatically)"
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
    return conn


async def serve(
    address: str,
    handlers: Handlers,
    *,
    name: str = "",
    on_connect: Callable[[Connection], None] | None = None,
    on_close: Callable[[Connection], None] | None = None,
    token: bytes | None = None,
) -> tuple[asyncio.AbstractServer, str]:
    """Listens on ``address``; returns the server and the address it really bound (port 0)."""
    loop = asyncio.get_running_loop()
    scheme, target = parse_address(address)

    if scheme == "tcp":
        token = token if token is not None else _cluster_token
        if token is None:
            raise ValueError(
                f"refusing to listen on {address} without a cluster token: anything reachable "
                "from other hosts must require it"
            )

    def factory() -> Connection:
        conn = Connection(
            handlers,
            name=name,
            on_close=on_close,
            expect_token=token if scheme == "tcp" else None,
        )
        if on_connect is not None:
            on_connect(conn)
        return conn

    if scheme == "unix":
        server = await loop.create_unix_server(factory, target)
        os.chmod(target, 0o600)
        return server, address
    server = await loop.create_server(factory, *target)
    host, port = server.sockets[0].getsockname()[:2]
    return server, f"tcp:{host}:{port}"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it is installed (4x asyncio's round trip, BRIEF §3)."""
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.new_event_loop()
