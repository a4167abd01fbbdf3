"""Callers' own channels (``reply_channel.py``) that the worker's executing thread reads
itself: a call that comes there wakes the thread that runs it, not the I/O thread first.

On the main connection a call wakes the worker's I/O thread, which decodes it and hands it
to the executing thread through the executor's queue: a second wake-up and the I/O thread's
Python work on every sync call's path. A caller's channel carries only its calls (pushed
tasks or actor calls, no streaming generators), so when the executing thread is the one
that runs them in order (a normal task's worker, a plain actor: no thread pool, no event
loop, no concurrency groups, not a host of shared-process actors), it can read them itself.

How: the channel's first request asks for it (``serve_on_thread``). The I/O thread stops
reading that connection (the caller waits for the answer, so nothing of it is unread in the
connection's decoder), hands a duplicate of its socket to the executing thread through the
queue, and answers yes. From then on the executing thread, when it has nothing queued,
waits on its channels and a wake-up pipe at once (``take``); what the I/O thread queues
meanwhile writes to the pipe (``put``). Calls read from a channel join the queue in the
order they came; their replies go out as any reply of this thread does (``Deferred``, on
the connection, which still owns the socket). A channel that ends (the caller closed it) is
closed here and its connection on the I/O thread.

Order: calls of one channel run in the order sent; a caller never has calls on its channel
and its main connection at once (``own_replies.py``). An exit request (the actor's handles
are gone) runs after the calls its channels hold when it is taken (``drain``), as it runs
after the calls queued before it on the main connection.
"""

from __future__ import annotations

import os
import queue
import select
from typing import Any

from ember.core_worker.task_spec import TaskSpec
from ember.protocol import codec
from ember.protocol.stream import Deferred

CALL_OPS = ("push_task", "push_actor_task")
READ_SIZE = 1 << 16


class _Served:
    __slots__ = ("conn", "fd", "decoder")

    def __init__(self, conn: Any, fd: int) -> None:
        self.conn = conn
        self.fd = fd  # a duplicate: the executing thread's to read and close
        self.decoder = codec.Decoder()


class ServedChannels:
    def __init__(self, calls: queue.SimpleQueue) -> None:
        self.calls = calls  # the executor's queue
        self.selecting = False  # the executing thread waits on its channels (not the queue)
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._served: dict[int, _Served] = {}  # fd -> channel; the executing thread's own
        self.calls_read = 0  # calls read by the executing thread

    # -- the I/O thread ----------------------------------------------------------------------
    def adopt(self, conn: Any) -> None:
        """In the ``serve_on_thread`` handler: the executing thread reads ``conn`` from now."""
        conn.transport.pause_reading()
        fd = os.dup(conn._fd)
        self.put(("adopt", conn, fd))

    def put(self, item: Any) -> None:
        """Queues ``item`` for the executing thread, waking it if it waits on its channels."""
        self.calls.put(item)
        if self.selecting:
            try:
                os.write(self._wake_w, b"\0")
            except BlockingIOError:
                pass  # full: it is awake already

    # -- the executing thread ------------------------------------------------------------------
    def take(self) -> Any:
        """The next item of the executor's queue, reading the channels while there is none."""
        calls = self.calls
        while True:
            if not self._served:
                item = calls.get()
            else:
                try:
                    item = calls.get_nowait()
                except queue.Empty:
                    self._wait()
                    continue
            if item is not None and item[0] == "adopt":
                self._served[item[2]] = _Served(item[1], item[2])
                continue
            return item

    def drain(self) -> bool:
        """Reads what the channels hold now, without waiting; True if any call was queued."""
        before = self.calls_read
        while self._served:
            ready = select.select(list(self._served), [], [], 0)[0]
            if not ready:
                break
            for fd in ready:
                self._read(fd)
        return self.calls_read > before

    def _wait(self) -> None:
        self.selecting = True
        try:
            if not self.calls.empty():  # queued after the last look (put saw no flag)
                return
            ready = select.select([self._wake_r, *self._served], [], [])[0]
        finally:
            self.selecting = False
        for fd in ready:
            if fd == self._wake_r:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
            else:
                self._read(fd)

    def _read(self, fd: int) -> None:
        ch = self._served.get(fd)
        if ch is None:
            return
        try:
            data = os.read(fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._end(ch, f"reading the caller's channel failed: {e}")
            return
        if not data:
            self._end(ch, "the caller closed its channel")
            return

        def on_message(msg: tuple) -> None:
            if msg[0] != codec.REQUEST:
                return  # (a caller sends only calls here)
            op, rid, body = msg[1], msg[2], msg[3]
            conn = ch.conn
            if op not in CALL_OPS:
                error = ValueError(f"{op!r} is not served on a caller's own channel")
                conn.loop.call_soon_threadsafe(conn._reply_error, rid, error)
                return
            spec = TaskSpec.from_wire(body)
            if spec.generator:  # (callers keep them on the main connection)
                spec.stream_conn = conn
            self.calls_read += 1
            self.calls.put((spec, Deferred(conn, rid)))

        try:
            ch.decoder.feed(data, on_message)
        except codec.FrameError as e:
            self._end(ch, f"an unreadable call: {e}")

    def _end(self, ch: _Served, reason: str) -> None:
        del self._served[ch.fd]
        os.close(ch.fd)
        conn = ch.conn
        if not conn.closed:
            conn.loop.call_soon_threadsafe(conn.close, reason)
