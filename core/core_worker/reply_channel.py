"""A driver thread's own connection to a worker on its node (an actor's, or a leased one's):
the thread writes its calls there and, waiting in ``get`` for one of them, reads the reply
from the socket itself.

On the main connection a sync call's reply wakes the I/O thread, which decodes it, stores
the value and wakes the waiting thread: on a two-vCPU VM that hand-over is 55-105 us of a
~430 us call (``benchmarks/wakeup_chain.py``, docs/call-path.md, eighth session). Here the
waiting thread is woken by the socket and handles the reply itself.

Who reads, and when:

- ``thread`` mode (the default): only the owning thread reads, and only while it waits in a
  single-ref ``get`` on one of this channel's calls (``read_for``). Replies of its other
  calls that come first are handled on the way.
- ``loop`` mode: the I/O thread reads (a reader on the loop) until no call is pending, then
  the channel is the thread's again. It is handed to the loop (``own_replies.py``) when
  anything else waits on one of its results (the memory store's
  wait hook), when the thread stops waiting with calls still pending, or when replies sit
  unread past ``UNREAD_S`` (the core worker's periodic sweep).

``read_lock`` is held by whoever reads; the loop never waits for it (a thread holding it is
reading, and asks for the hand-over when it lets go, ``wants_loop``). Calls are written by
user threads one at a time (the submitter's lock). What a reply means (done, retried, lost
with its worker) is the submitter's: this module frames, reads and hands each message on.
"""

from __future__ import annotations

import errno
import itertools
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ember.protocol import codec
from ember.protocol.errors import ConnectionClosedError
from ember.protocol.messages.worker import ServeOnThread

UNREAD_S = 0.02  # a pending call's reply unread this long goes to the loop
WRITE_STALL_S = 5.0  # a peer that reads nothing for this long is given up (as the main path)
CONNECT_TIMEOUT_S = 5.0
READ_SIZE = 1 << 16
DONTWAIT = socket.MSG_DONTWAIT
PEEK_WAIT = socket.MSG_PEEK
PEEK_NOW = socket.MSG_PEEK | socket.MSG_DONTWAIT
MAIN_THREAD = threading.main_thread().ident

# (channel, task spec, reply or None, exception or None, read on the loop?)
OnReply = Callable[["ReplyChannel", Any, Any, BaseException | None, bool], None]
# (channel, task spec, reply or None, exception or None): on_reply raised for this reply
OnInterrupted = Callable[["ReplyChannel", Any, Any, BaseException | None], None]
OnClosed = Callable[["ReplyChannel"], None]


class ReplyChannel:
    def __init__(
        self,
        sock: socket.socket,
        owner: int,
        on_reply: OnReply,
        on_closed: OnClosed,
        served_on_thread: bool = False,
        on_interrupted: OnInterrupted | None = None,
    ) -> None:
        # Blocking, so that a thread waiting for its reply with no deadline makes one system
        # call (recv), not two (select, then read); the loop and the writers ask for
        # non-blocking calls one by one (MSG_DONTWAIT).
        sock.setblocking(True)
        self.sock = sock
        self.fd = sock.fileno()
        self.owner = owner  # the thread that opened it, and reads it in thread mode
        self.on_reply = on_reply
        self.on_closed = on_closed  # once, when it ended (the socket is the caller's to close)
        # Told of a reply whose on_reply raised part-way (a Ctrl-C lands on the main thread,
        # which reads here): the reply is off ``pending``, so its call must be ended there.
        self.on_interrupted = on_interrupted
        # Whole replies may wait in the decoder, not handed on yet (an interrupt came, or the
        # main thread's peeked bytes are in and not fed): read before the socket.
        self._interrupted = False
        # Re-entrant only for ``_is_owned``: ``read_for`` lets go of a hold an interrupt cut
        # short (nobody takes it twice).
        self.read_lock = threading.RLock()
        self.pending: dict[int, tuple[Any, float]] = {}  # request id -> (spec, sent at)
        self.loop_reads = False
        self.wants_loop = False
        self.closed = False
        self.close_reason = ""
        self._decoder = codec.Decoder()
        self._ids = itertools.count(1)
        self._on_loop = False  # set while the loop feeds the decoder
        self.last_used = time.monotonic()  # the last call's (idle channels are closed)
        # Whether the worker's executing thread reads this channel itself (not its I/O
        # thread): served_channels.py, on the worker's side.
        self.served_on_thread = served_on_thread

    @classmethod
    def open(
        cls,
        path: str,
        owner: int,
        on_reply: OnReply,
        on_closed: OnClosed,
        on_interrupted: OnInterrupted | None = None,
    ) -> ReplyChannel:
        """Connects to a worker's Unix socket (same node: no token; the file's mode guards
        it). The worker takes it as one more connection and answers on it."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(path)
            served = _ask_served_on_thread(sock)
        except OSError:
            sock.close()
            raise
        return cls(sock, owner, on_reply, on_closed, served, on_interrupted)

    # -- user threads, one at a time ---------------------------------------------------------
    def reserve(self, spec: Any) -> int:
        """The request id of the next call, pending from now (its reply may be quick)."""
        rid = next(self._ids)
        self.pending[rid] = (spec, time.monotonic())
        self.last_used = time.monotonic()
        return rid

    def write(self, rid: int, op: str, body: Any) -> bool:
        """Writes call ``rid`` as request ``op`` (``body``: its wire form). False, nothing
        sent and ``rid`` no longer pending: the channel is gone."""
        if self.closed:
            self.pending.pop(rid, None)
            return False
        frame = codec.frame(codec.encode_request(op, rid, body))
        view = memoryview(frame)
        stall_until = None
        while view:
            try:
                n = self.sock.send(view, DONTWAIT)
            except BlockingIOError:
                n = 0
            except OSError as e:
                if len(view) == len(frame):
                    self.pending.pop(rid, None)
                    return False
                self.shutdown(f"a call could not be written: {e}")  # torn: the reader fails it
                return True
            view = view[n:]
            if view:  # the worker is not reading: wait (bounded) rather than tear the frame
                stall_until = stall_until or time.monotonic() + WRITE_STALL_S
                left = stall_until - time.monotonic()
                if left <= 0 or not select.select([], [self.fd], [], left)[1]:
                    self.shutdown("the worker stopped reading its calls")
                    return True
        return True

    def read_for(self, rid: int, deadline: float | None) -> None:
        """On the owning thread, in ``get``: reads until call ``rid`` is answered, the
        deadline passes, the channel ends or goes to the loop. Returns having let go."""
        lock = self.read_lock
        try:
            if not lock.acquire(timeout=0.05):
                return
            try:
                self._read_until(rid, deadline)
            finally:
                lock.release()
        except BaseException:
            # Ctrl-C right after the acquire, before the inner try, would keep the lock
            # held by this thread for good (then no one, the loop included, reads again).
            if lock._is_owned():
                lock.release()
            raise

    def _read_until(self, rid: int, deadline: float | None) -> None:
        while rid in self.pending and not self.closed and not self.loop_reads:
            if self._interrupted:
                self._read_once()  # the replies an interrupt left in the decoder
                continue
            if deadline is None and self._read_once(wait=True):
                continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            try:
                ready = select.select([self.fd], [], [], left)[0]
            except (OSError, ValueError) as e:  # closed under us
                self._broken(f"reading the worker's replies failed: {e}")
                return
            if ready:
                self._read_once()

    # -- the loop -------------------------------------------------------------------------
    def read_on_loop(self) -> None:
        """The loop's reader callback (loop mode): what is there now, without blocking."""
        if not self.read_lock.acquire(blocking=False):
            return  # the thread is between its checks; level-triggered: called again
        self._on_loop = True
        try:
            self._read_once()
        finally:
            self._on_loop = False
            self.read_lock.release()

    def oldest_unread(self, now: float) -> float:
        """Seconds the oldest pending call has waited for its reply (0 with none)."""
        try:
            return now - next(iter(self.pending.values()))[1]
        except (StopIteration, RuntimeError):  # none, or the owner just added one
            return 0.0

    # -- both ---------------------------------------------------------------------------------
    def shutdown(self, reason: str) -> None:
        """Ends the channel from any thread: whoever reads next sees the end and fails what
        is pending (through ``on_reply``)."""
        self.close_reason = self.close_reason or reason
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read_once(self, wait: bool = False) -> bool:
        """One read (``wait``: blocking until something comes), and each whole message in it
        handed on. Holding ``read_lock``. False: nothing to read without waiting (the loop,
        which reads it at times, may have made the socket non-blocking)."""
        if self._interrupted:  # whole replies an interrupt left in the decoder go first
            self._feed(b"")
            return True
        # Only the main thread is interrupted (Ctrl-C): it peeks, so that an interrupt raised
        # as a read returns loses no bytes (read again next time); other threads take them.
        main = threading.get_ident() == MAIN_THREAD
        try:
            if main:
                data = self.sock.recv(READ_SIZE, PEEK_WAIT if wait else PEEK_NOW)
            else:
                data = self.sock.recv(READ_SIZE, 0 if wait else DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as e:
            if e.errno == errno.EBADF:
                data = b""
            else:
                self._broken(f"reading the worker's replies failed: {e}")
                return True
        if not data:
            self._broken(self.close_reason or "the worker closed the connection")
            return True
        if main:
            n = len(data)
            # CPython raises a pending KeyboardInterrupt only once a call returns (or at a
            # function's start, or a loop's jump back), so from here to the consuming recv's
            # return none can come between: the bytes are in the decoder and off the socket
            # together. ``_interrupted`` says whole replies may wait there until handed on.
            self._interrupted = True
            self._decoder._buf += data
            try:
                self.sock.recv(n, DONTWAIT)
            except OSError as e:
                self._broken(f"reading the worker's replies failed: {e}")
                return True
            data = b""
        self._feed(data)
        return True

    def _feed(self, data: bytes) -> None:
        try:
            self._decoder.feed(data, self._on_message, keep_raised=True)
        except codec.FrameError as e:
            self._broken(f"an unreadable reply: {e}")
        except BaseException:
            # A KeyboardInterrupt (or a bug) mid-message: the replies after it stay in the
            # decoder, read before the socket next time.
            self._interrupted = True
            raise
        else:
            self._interrupted = False

    def _on_message(self, msg: tuple) -> None:
        # A message may come twice (the decoder keeps one an interrupt cut short): only the
        # first hand-on of a call's reply takes it off ``pending``.
        kind = msg[0]
        if kind == codec.REPLY:
            if msg[1] in self.pending:
                self._hand_on(msg[1], msg[2], None)
        elif kind == codec.ERROR:
            if msg[1] in self.pending:
                self._hand_on(msg[1], None, codec.decode_error(msg))
        # Nothing else is sent on this connection (streaming generators stay on the main one).

    def _hand_on(self, rid: int, reply: Any, exc: BaseException | None) -> None:
        taken = None
        try:
            # No call between taking the entry and noting it taken: CPython raises a pending
            # KeyboardInterrupt only as a call returns or a function starts, so it comes
            # either before (the reply is handed on again) or during on_reply (below).
            entry = self.pending[rid]
            del self.pending[rid]
            taken = entry
            self.on_reply(self, entry[0], reply, exc, self._on_loop)
        except BaseException:
            # Ctrl-C on the main thread, which settles its replies here, can land anywhere
            # in on_reply: the call is off ``pending`` and may be half settled. The owner
            # ends it on the loop (``on_interrupted``), then the interrupt goes on up.
            if taken is not None and self.on_interrupted is not None:
                self.on_interrupted(self, taken[0], reply, exc)
            raise

    def _broken(self, reason: str) -> None:
        """The connection ended: every pending call is handed on as lost with its worker."""
        if self.closed:
            return
        self.closed = True
        self.close_reason = self.close_reason or reason
        lost = [spec for spec, _sent in self.pending.values()]
        self.pending.clear()
        for spec in lost:
            self.on_reply(self, spec, None, ConnectionClosedError(self.close_reason), False)
        self.on_closed(self)


def _ask_served_on_thread(sock: socket.socket) -> bool:
    """The channel's first request, on the still-blocking socket (its timeout): may the
    worker's executing thread read this channel itself? Nothing else is sent until the
    answer, so the worker's I/O thread has nothing of ours unread when it lets go. A worker
    that cannot (a thread pool, an event loop) answers False; an error answer is a no too."""
    sock.sendall(codec.frame(codec.encode_request(ServeOnThread.op, 0, None)))
    decoder = codec.Decoder()
    answer: list = []

    def on_message(msg: tuple) -> bool:
        answer.append(msg)
        return True

    while not answer:
        data = sock.recv(4096)
        if not data:
            raise ConnectionResetError("the worker closed the connection")
        decoder.feed(data, on_message)
    if decoder.buffered():
        raise ConnectionError("the worker sent more than its answer")
    msg = answer[0]
    return msg[0] == codec.REPLY and msg[1] == 0 and msg[2] is True
