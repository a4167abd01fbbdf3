"""The asyncio side of the wire: a ``Connection`` is an ``asyncio.Protocol`` over any
transport (Unix or TCP socket, or the in-process pair), speaking the frames of
``ember.protocol.codec``.

Rules:
- ``request`` / ``request_cb`` / ``call`` send ``(REQUEST, op, req_id, body)`` and get the
  reply, or the handler's exception raised again (see ``ember.protocol.errors``); ``send``
  sends a one-way ``(ONEWAY, op, body)``. Where an op is given, a message object from
  ``ember.protocol.messages`` may be given instead: it travels as its op and body.
- Handlers are looked up by ``op`` in the table the connection was made with; a handler gets
  ``(conn, body)`` and returns the result or an awaitable of it (or ``DEFERRED``, answering
  later through ``conn.deferred()``).
- Messages on one connection are handled in the order they arrive (synchronous handlers run
  inline; an awaitable's reply goes out when it completes).
- Writes made in one event-loop iteration leave in one system call.
- A listener made with ``expect_token`` reads the first frame raw (bounded in size) and checks
  the token before anything is unpickled; the client side waits for the answer in
  ``send_token``. Until then the peer is held to ``preauth``'s limits (``guard``): a deadline
  to present the token and a cap on such connections per IP. ``on_authenticated`` runs once
  the token is accepted. Which listeners demand it is the transport's business
  (``ember.protocol.transports``).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import os
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

from ember.protocol import codec, preauth
from ember.protocol.codec import (
    AUTH_OK,
    AUTH_REFUSED,
    ERROR,
    MAX_AUTH_FRAME,
    ONEWAY,
    REPLY,
    REQUEST,
    FrameError,
)
from ember.protocol.errors import (
    AuthenticationError,
    ConnectionClosedError,
    HandlerCancelledError,
    NoHandlerError,
)
from ember.protocol.zero_pages import release_object_zero_pages

logger = logging.getLogger(__name__)

Handler = Callable[["Connection", Any], Any]
Handlers = dict[str, Handler]

_frame = codec.frame
_encode_request = codec.encode_request
_encode_oneway = codec.encode_oneway
_encode_reply = codec.encode_reply
_decode_error = codec.decode_error

# How soon the loop tries again to flush queued frames while a thread holds the write lock.
FLUSH_RETRY_S = 0.001


def _op_body(msg: Any) -> tuple[str, Any]:
    """A message object travels as its op and body (see ember.protocol.messages)."""
    return msg.op, msg.to_body()


class Connection(asyncio.Protocol):
    def __init__(
        self,
        handlers: Handlers,
        *,
        on_close: Callable[[Connection], None] | None = None,
        name: str = "",
        expect_token: bytes | None = None,
        guard: preauth.PreAuthGuard | None = None,
        on_authenticated: Callable[[Connection], None] | None = None,
    ) -> None:
        self.handlers = handlers
        self.on_close = on_close
        self.name = name
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        self.close_reason = ""
        self.state: dict[str, Any] = {}  # per-connection facts a handler may keep
        self._decoder = codec.Decoder()
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
        # Listener side, until the token is accepted: the guard's slot for the peer's IP and
        # the deadline timer (see preauth).
        self._guard = guard if expect_token is not None else None
        self._on_authenticated = on_authenticated
        self._guarded_ip: str | None = None
        self._auth_timer: asyncio.TimerHandle | None = None
        self._auth_timer_due = 0.0

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
        if self._guard is not None:
            self._guard_stranger()

    def data_received(self, data: bytes) -> None:
        if self._expect_token is not None:
            if not self._receive_token(data):
                return
            data = b""  # whatever followed the token frame is still in the decoder
        try:
            self._decoder.feed(data, self._dispatch)
        except FrameError as e:
            logger.error("%s: %s; closing", self.name, e)
            self.close(str(e))

    def connection_lost(self, exc: Exception | None) -> None:
        self._mark_closed(str(exc) if exc else "peer closed the connection")

    # -- sending ---------------------------------------------------------------------------
    def _write(self, payload: bytes) -> None:
        if self.closed:
            raise ConnectionClosedError(f"connection {self.name} is closed: {self.close_reason}")
        self._queue_frame(payload)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _queue_frame(self, payload: bytes) -> None:
        # One extend (one C call): other threads add frames too (``write_batched``), and a
        # frame's header and payload must not be split by theirs.
        self._out.extend((codec.HEADER.pack(len(payload)), payload))

    def _flush(self) -> None:
        if not self._flush_scheduled:
            return
        if self.closed:
            self._flush_scheduled = False
            self._out.clear()
            return
        if not self._out:  # (not cleared: another thread may have added a frame since)
            self._flush_scheduled = False
            return
        # The loop never waits for the lock: a thread holding it may be waiting for the peer
        # to read (a full socket buffer), and the peer may be waiting for this loop to read
        # (in one process, the peer is this loop): both would stall until the writer's
        # deadline closed the connection. Tried again shortly; the flag stays set meanwhile.
        if not self._wlock.acquire(blocking=False):
            self.loop.call_later(FLUSH_RETRY_S, self._flush)
            return
        try:
            # Emptying the queue under the lock keeps order with writers on other threads:
            # they only write when, holding the lock, they see nothing queued ahead of them.
            self._flush_scheduled = False
            out = self._out
            self._out = []
            self.transport.write(b"".join(out) if len(out) > 2 else out[0] + out[1])
        finally:
            self._wlock.release()

    def write_direct(self, payload: bytes) -> bool:
        """From a thread other than the loop's: writes one frame straight to the socket when
        nothing is queued ahead of it (saves a wake-up of the loop). False: use the loop."""
        if self.closed or self._fd < 0 or self._out:
            return False
        frame = _frame(payload)
        # Another thread writing now: the loop writes this one (with whatever else is
        # queued, in one call) rather than this thread queue up behind the lock.
        if not self._wlock.acquire(blocking=False):
            return False
        try:
            if self.closed or self._out or self.transport.get_write_buffer_size():
                return False
            return self._write_frame_locked(frame)
        finally:
            self._wlock.release()

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

    def send(self, op: Any, body: Any = None) -> None:
        """A one-way message. Call on the connection's loop."""
        if op.__class__ is not str:
            op, body = _op_body(op)
        self._write(_encode_oneway(op, body))

    def request(self, op: Any, body: Any = None) -> asyncio.Future:
        """A request; the future gets the reply. Call on the connection's loop."""
        if op.__class__ is not str:
            op, body = _op_body(op)
        fut = self.loop.create_future()
        if self.closed:
            fut.set_exception(
                ConnectionClosedError(f"connection {self.name} is closed: {self.close_reason}")
            )
            return fut
        rid = next(self._ids)
        self._pending[rid] = fut
        self._write(_encode_request(op, rid, body))
        return fut

    def request_cb(
        self, op: Any, body: Any, callback: Callable[[Any, BaseException | None], None]
    ) -> None:
        """A request whose reply runs ``callback(result, error)`` as soon as it is read.

        Cheaper than ``request`` on the hot path: no Future, no extra loop iteration.
        """
        if op.__class__ is not str:
            op, body = _op_body(op)
        if self.closed:
            callback(
                None,
                ConnectionClosedError(f"connection {self.name} is closed: {self.close_reason}"),
            )
            return
        rid = next(self._ids)
        self._pending[rid] = callback
        self._write(_encode_request(op, rid, body))

    def request_cb_direct(
        self, op: Any, body: Any, callback: Callable[[Any, BaseException | None], None]
    ) -> bool:
        """``request_cb`` from a thread other than the loop's, written straight to the socket
        (saves waking the loop). False, having sent nothing: use the loop instead.

        The callback runs on the loop, like ``request_cb``'s. Registering it under the write
        lock, which ``_mark_closed`` also takes, means a closing connection either fails it
        or never sees it, so it can't be lost.
        """
        if self.closed or self._fd < 0 or self._out:
            return False
        if op.__class__ is not str:
            op, body = _op_body(op)
        rid = next(self._ids)
        frame = _frame(_encode_request(op, rid, body))
        with self._wlock:
            if self.closed or self._out or self.transport.get_write_buffer_size():
                return False
            self._pending[rid] = callback
            if not self._write_frame_locked(frame):
                self._pending.pop(rid, None)
                return False
        return True

    def request_cb_batched(
        self, op: str, body: Any, callback: Callable[[Any, BaseException | None], None]
    ) -> bool:
        """``request_cb`` from a thread other than the loop's, for a call made while earlier
        ones are in flight: the frame joins the loop's next write. A burst of calls is then
        one write on the loop, and the calling thread keeps the GIL (``os.write`` gives it
        up, and getting it back from a busy loop thread cost more than the write). False,
        having sent nothing: use the loop instead."""
        if self.closed or self._fd < 0:
            return False
        rid = next(self._ids)
        payload = _encode_request(op, rid, body)
        with self._wlock:
            if self.closed:
                return False
            self._pending[rid] = callback
            self._queue_frame(payload)
        self._flush_soon_threadsafe()
        return True

    def write_batched(self, payload: bytes) -> bool:
        """From a thread other than the loop's: one frame joins the loop's next write (see
        ``request_cb_batched``). False, having sent nothing: the connection is closed."""
        with self._wlock:
            if self.closed:
                return False
            self._queue_frame(payload)
        self._flush_soon_threadsafe()
        return True

    def _flush_soon_threadsafe(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon_threadsafe(self._flush)

    def send_direct(self, op: str, body: Any = None) -> bool:
        """``send`` from a thread other than the loop's, written straight to the socket when
        nothing is queued ahead of it. False, having sent nothing: use ``send_threadsafe``."""
        return self.write_direct(_encode_oneway(op, body))

    def deferred(self) -> Deferred:
        """Inside a request handler: a handle to answer this request later, from any thread."""
        return Deferred(self, self._current_rid)

    async def call(self, op: Any, body: Any = None, timeout: float | None = None) -> Any:
        fut = self.request(op, body)
        if timeout is None:
            return await fut
        return await asyncio.wait_for(fut, timeout)

    def send_threadsafe(self, op: Any, body: Any = None) -> None:
        self.loop.call_soon_threadsafe(self._send_quiet, op, body)

    def _send_quiet(self, op: Any, body: Any) -> None:
        if not self.closed:
            self.send(op, body)

    def close(self, reason: str = "closed locally") -> None:
        if self.transport is not None and not self.closed:
            self._flush()
            self.transport.close()
        self._mark_closed(reason)

    # -- receiving -------------------------------------------------------------------------
    def _dispatch(self, msg: tuple) -> bool:
        """Handles one message; True when the connection has closed (stop reading)."""
        kind = msg[0]
        if kind == REPLY:
            waiter = self._pending.pop(msg[1], None)
            if waiter is None:
                return self.closed
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    waiter.set_result(msg[2])
            else:
                waiter(msg[2], None)
        elif kind == REQUEST:
            op, rid, body = msg[1], msg[2], msg[3]
            handler = self.handlers.get(op)
            if handler is None:
                self._reply_error(rid, NoHandlerError(f"{self.name}: no handler for {op!r}"))
                return self.closed
            self._current_rid = rid
            try:
                result = handler(self, body)
            except Exception as e:
                self._reply_error(rid, e)
                return self.closed
            if result is DEFERRED:
                return self.closed
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                task.add_done_callback(lambda t, rid=rid: self._reply_from_task(rid, t))
            else:
                self._reply(rid, result)
        elif kind == ONEWAY:
            if self._auth_waiter is not None and msg[1] in (AUTH_OK, AUTH_REFUSED):
                self._auth_answer(msg[1], msg[2])
                return self.closed
            handler = self.handlers.get(msg[1])
            if handler is None:
                logger.warning("%s: no handler for one-way %r", self.name, msg[1])
                return self.closed
            try:
                result = handler(self, msg[2])
                if inspect.isawaitable(result):
                    asyncio.ensure_future(result).add_done_callback(_log_task_error)
            except Exception:
                logger.exception("%s: handler for %r failed", self.name, msg[1])
        elif kind == ERROR:
            waiter = self._pending.pop(msg[1], None)
            if waiter is None:
                return self.closed
            exc = _decode_error(msg)
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    waiter.set_exception(exc)
            else:
                waiter(None, exc)
        return self.closed

    def _reply(self, rid: int, result: Any) -> None:
        if self.closed:
            return
        try:
            payload = _encode_reply(rid, result)
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
        self._write(codec.encode_error(rid, exc))

    def _reply_from_task(self, rid: int, task: asyncio.Task) -> None:
        if task.cancelled():
            self._reply_error(rid, HandlerCancelledError("the handler was cancelled"))
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
        self._release_guard()
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
    def _receive_token(self, data: bytes) -> bool:
        """The listener's side: True once the token frame has been accepted (later bytes are
        then read as messages); False while it is incomplete or after refusing it."""
        try:
            first = self._decoder.feed_raw(data, MAX_AUTH_FRAME)
        except FrameError as e:
            self._refuse(f"no cluster token sent: {e}", preauth.OVERSIZED)
            return False
        if first is None:
            return False
        reason = codec.check_auth(first, self._expect_token)
        if reason is not None:
            self._refuse(reason)
            return False
        self._expect_token = None
        self._release_guard()
        self.send(AUTH_OK)
        if self._on_authenticated is not None:
            self._on_authenticated(self)
        return True

    def _refuse(self, reason: str, kind: str = preauth.TOKEN) -> None:
        peer = self.transport.get_extra_info("peername") if self.transport else None
        if self._guard is not None:
            self._guard.refuse(self.name, peer, kind, reason)
        else:
            logger.warning("%s: refused a connection from %s: %s", self.name, peer, reason)
        # Said before closing, so the client can tell the user why; nothing else is read.
        self.transport.write(codec.encode_auth_refused(reason))
        self.close(reason)

    def _guard_stranger(self) -> None:
        """A new peer that owes the token: it takes one of its IP's slots, or is refused at
        once; and it has the guard's deadline to present the token."""
        guard = self._guard
        assert guard is not None and self.transport is not None and self.loop is not None
        ip = preauth.peer_ip(self.transport.get_extra_info("peername"))
        if not guard.admit(self.name, ip):
            self._refuse(
                f"more than {guard.per_ip} connections from {ip} have not presented the token",
                preauth.PER_IP,
            )
            return
        self._guarded_ip = ip
        self._auth_timer_due = self.loop.time() + guard.deadline
        self._auth_timer = self.loop.call_later(guard.deadline, self._auth_deadline, 0)

    def _auth_deadline(self, extensions: int) -> None:
        self._auth_timer = None
        if self.closed or self._expect_token is None or self._guard is None:
            return
        # Timers run before the loop reads its sockets: after a stall of the loop (a busy
        # node), a token that arrived in time may be unread yet. A timer that fired late gets
        # one short extension, so such a token is read before it is judged.
        late = self.loop.time() - self._auth_timer_due if extensions == 0 else 0.0
        if late > 0.5:
            self._auth_timer = self.loop.call_later(0.5, self._auth_deadline, 1)
            return
        self._refuse(
            f"no cluster token within {self._guard.deadline:g} s of connecting", preauth.DEADLINE
        )

    def _release_guard(self) -> None:
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        if self._guarded_ip is not None and self._guard is not None:
            self._guard.release(self.name, self._guarded_ip)
            self._guarded_ip = None

    def send_token(self, token: bytes) -> asyncio.Future:
        """Presents the token; the future resolves when the listener accepts it."""
        self._auth_waiter = self.loop.create_future()
        self.transport.write(codec.encode_auth(token))
        return self._auth_waiter

    def _auth_answer(self, op: str, body: Any) -> None:
        waiter, self._auth_waiter = self._auth_waiter, None
        if waiter is None or waiter.done():
            return
        if op == AUTH_OK:
            waiter.set_result(True)
        else:
            waiter.set_exception(
                AuthenticationError(f"{self.name} refused this connection: {body}")
            )


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

    def resolve_threadsafe(self, value: Any, batch: bool = False, settled: bool = False) -> None:
        """``batch``: more replies follow soon (calls wait to run), so this one joins the
        loop's next write rather than give up the GIL for its own (``request_cb_batched``).
        ``settled``: returns only once the reply is written (at most a second's wait for the
        loop): what runs next in this process may kill it, and must not take this with it."""
        conn = self.conn
        try:
            payload = _encode_reply(self.rid, value)
        except Exception:
            conn.loop.call_soon_threadsafe(conn._reply_now, self.rid, value)  # error reply
            return
        if batch:
            if not conn.write_batched(payload):
                conn.loop.call_soon_threadsafe(conn._write_now, payload)
        elif not conn.write_direct(payload):
            conn.loop.call_soon_threadsafe(conn._write_now, payload)
            if settled:
                written = threading.Event()
                conn.loop.call_soon_threadsafe(written.set)  # runs after the write, in order
                written.wait(1.0)


def _log_task_error(task: asyncio.Future) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("one-way handler failed", exc_info=task.exception())


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it is installed: its request/reply round trip is about 4x asyncio's.
    The pages of zeros inside the new loop (its receive buffer) go back to the kernel until
    reads fill them (``zero_pages``): ~0.24 MiB of every process's own memory."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.new_event_loop()
    loop = uvloop.new_event_loop()
    release_object_zero_pages(loop)  # no other thread has it yet
    return loop
