"""Actor calls whose replies the calling thread reads itself: a driver's calls to actors on
its node, on the thread's own channel to the actor (``reply_channel.py``, which says why).

Which calls go there (``usable``, under the submitter's lock): not streaming generators
(their items come back on the connection the call went out on), not to shared-process
actors (thousands of them share a few processes: a socket each would cost both sides an
open file and a connection per actor), not from the I/O thread,
and only while nothing of ours to that actor is in flight on the main connection: a worker
keeps the order of calls per connection, so a caller's calls must not be on both at once.
For the same reason, while the channel has calls pending, the actor's other calls go on it
too (any user thread's: the thread that opened it reads its own replies, another thread's
wait hands the channel to the loop), and those the I/O thread sends wait in its queue until
the channel is drained.

What a reply read on the calling thread does (``_on_reply``): the common case, a call that
succeeded with small values, no retries and no object arguments, is settled right there:
the value goes into the memory store, which the waiting thread reads next. Anything else
(errors, retries, objects in the store, a lost worker) is handed to the I/O thread, which
settles it as it settles the main connection's replies.

Who reads is the channel's business; when the loop takes over is decided here: when anyone
else waits on one of the channel's results (the memory store's wait hook), when the thread
stopped reading while the loop was wanted (``wants_loop``), and when a reply sits unread
past ``UNREAD_S`` (``sweep``, every drain period): a call made and never waited on still
ends, and its events still reach the dashboard.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ember.core_worker.reply_channel import UNREAD_S, ReplyChannel
from ember.core_worker.task_spec import TaskSpec
from ember.ids import TASK_ID_SIZE

UNIX = "unix:"
IDLE_CLOSE_S = 5.0


class OwnReplies:
    def __init__(self, submitter: Any, host: Any) -> None:
        self.submitter = submitter
        self.host = host
        self.calls: dict[bytes, tuple[ReplyChannel, int]] = {}  # task id -> (channel, rid)
        self.actor_of: dict[ReplyChannel, Any] = {}  # channel -> the submitter's actor state
        # {thread: (task id, actor state)} of its last call on a main connection
        self.last_main: dict[int, tuple[bytes, Any]] = {}
        # sent: calls sent on a channel; settled_here: replies settled on the calling thread;
        # to_loop: replies the loop settled; taken_over: hand-overs of a channel to the loop
        self.counts = {"sent": 0, "settled_here": 0, "to_loop": 0, "taken_over": 0}

    # -- the user's thread, under the submitter's lock ---------------------------------------
    def usable(self, st: Any, spec: TaskSpec) -> bool:
        if spec.generator or st.shared_process or not (st.address or "").startswith(UNIX):
            return False
        me = threading.get_ident()
        io = self.host.io_thread
        if io is not None and me == io.ident:
            return False
        ch = st.side
        if ch is None:  # opened for a caller seen waiting on its calls one at a time
            return st.sync_hint and not st.in_flight
        # Any thread may send on it (one at a time: the submitter's lock is held), so a call
        # never waits behind another thread's (a long poll on an async actor); only the
        # thread that opened it reads it itself, the others' waits hand it to the loop.
        return not ch.closed and not ch.close_reason and len(st.in_flight) == len(ch.pending)

    def send(self, st: Any, spec: TaskSpec) -> bool:
        """Sends ``spec`` on the thread's channel (opening it first). False, nothing sent."""
        ch = st.side
        if ch is None:
            try:
                ch = ReplyChannel.open(
                    st.address[len(UNIX) :], threading.get_ident(), self._on_reply, self._on_closed
                )
            except OSError:
                return False
            self.actor_of[ch] = st
            st.side = ch
        rid = ch.reserve(spec)
        st.in_flight[spec.task_id] = spec
        self.calls[spec.task_id] = (ch, rid)  # a return id's first bytes are its task's id
        if ch.write(rid, spec.to_wire()):
            self.counts["sent"] += 1
            return True
        self._forget(spec)
        st.in_flight.pop(spec.task_id, None)
        return False

    def note_main_call(self, st: Any, spec: TaskSpec) -> None:
        """A call this thread sent on the main connection (for ``note_single_wait``)."""
        self.last_main[threading.get_ident()] = (spec.task_id, st)

    # -- the user's thread, waiting ------------------------------------------------------------
    def note_single_wait(self, object_id: bytes) -> None:
        """This thread waits in a single-ref ``get`` for the call it just sent on the main
        connection: a sync caller, which the actor's own channel will serve from its next
        call. (A burst of calls waited on together never opens one: a socket per actor
        for calls that gain nothing from it.)"""
        entry = self.last_main.get(threading.get_ident())
        if entry is not None and entry[0] == object_id[:TASK_ID_SIZE]:
            entry[1].sync_hint = True

    def read_own_reply(self, object_id: bytes, deadline: float | None) -> bool:
        """In a single-ref ``get``: if ``object_id`` is the result of this thread's call on
        its channel, reads replies until it is settled (or the deadline, or the loop takes
        over). False: not such a call, wait as usual."""
        entry = self.calls.get(object_id[:TASK_ID_SIZE])
        if entry is None:
            return False
        ch, rid = entry
        if ch.owner != threading.get_ident() or ch.loop_reads:
            return False
        ch.read_for(rid, deadline)
        if ch.wants_loop:
            self.hand_to_loop(ch)
        return True

    def on_wait(self, object_ids: list[bytes]) -> None:
        """The memory store's hook, on any thread: someone waits on these the usual way. A
        channel whose call makes one of them is read by the loop from now on."""
        calls = self.calls
        if not calls:
            return
        handed = set()
        for object_id in object_ids:
            entry = calls.get(object_id[:TASK_ID_SIZE])
            ch = entry[0] if entry is not None else None
            if ch is not None and not ch.loop_reads and ch not in handed:
                handed.add(ch)
                self.hand_to_loop(ch)

    # -- replies, on whichever thread read them ------------------------------------------------
    def _on_reply(
        self, ch: ReplyChannel, spec: TaskSpec, reply: Any, exc: BaseException | None, on_loop: bool
    ) -> None:
        self._forget(spec)
        st = self.actor_of.get(ch)
        if st is None:
            return
        settle = self.submitter.settle_reply
        if not on_loop and exc is None and _settles_here(st, spec, reply):
            self.counts["settled_here"] += 1
            self.submitter.settle_here(st, spec, reply)
        else:
            self.counts["to_loop"] += 1
            if on_loop:
                settle(st, spec, reply, exc)
            else:
                self.host.loop.call_soon_threadsafe(settle, st, spec, reply, exc)
        if not ch.pending and (st.queue or st.slow_pending):
            # Calls held back while the channel had calls pending can go now.
            self.host.loop.call_soon_threadsafe(self.submitter.flush_locked, st)

    def _forget(self, spec: TaskSpec) -> None:
        self.calls.pop(spec.task_id, None)

    # -- the loop ----------------------------------------------------------------------------
    def hand_to_loop(self, ch: ReplyChannel) -> None:
        """Any thread: the loop reads ``ch`` until nothing is pending there."""
        self.host.loop.call_soon_threadsafe(self._take_over, ch)

    def _take_over(self, ch: ReplyChannel) -> None:
        if ch.closed or ch.loop_reads or not ch.pending:
            return
        if not ch.read_lock.acquire(blocking=False):
            ch.wants_loop = True  # the thread reads now; it asks again when it lets go
            return
        try:
            self.counts["taken_over"] += 1
            ch.loop_reads = True
            ch.wants_loop = False
            self.host.loop.add_reader(ch.fd, self._loop_read, ch)
        finally:
            ch.read_lock.release()

    def _loop_read(self, ch: ReplyChannel) -> None:
        ch.read_on_loop()
        if ch.loop_reads and not ch.closed and not ch.pending:
            self.host.loop.remove_reader(ch.fd)
            ch.loop_reads = False  # the thread's again

    def sweep(self) -> None:
        """Every drain period: a channel whose oldest reply waits unread goes to the loop; one
        unused for ``IDLE_CLOSE_S`` is closed (a driver that called thousands of actors once
        keeps no socket for each)."""
        if not self.actor_of:
            return
        now = time.monotonic()
        for ch, st in list(self.actor_of.items()):
            if ch.closed or ch.loop_reads:
                continue
            if ch.oldest_unread(now) > UNREAD_S:
                self._take_over(ch)
            elif not ch.pending and now - ch.last_used > IDLE_CLOSE_S:
                with self.submitter.lock:  # no call can be sent on it meanwhile
                    if ch.pending or st.side is not ch:
                        continue
                    st.side = None
                    st.sync_hint = False  # until the caller is seen waiting one by one again
                ch.shutdown("idle")
                ch.closed = True
                self._retire(ch)

    def end(self, st: Any, reason: str) -> None:
        """On the loop: the actor's worker is gone or replaced; its channel ends (what is
        pending there is the GCS's verdict's, as on the main connection) and is read to
        its end at once."""
        ch = st.side
        if ch is None:
            return
        ch.shutdown(reason)
        self._take_over(ch)

    def _on_closed(self, ch: ReplyChannel) -> None:
        self.host.loop.call_soon_threadsafe(self._retire, ch)

    def _retire(self, ch: ReplyChannel) -> None:
        """On the loop: closes an ended channel's socket once no one reads it."""
        if not ch.read_lock.acquire(blocking=False):
            self.host.loop.call_later(0.005, self._retire, ch)
            return
        try:
            if ch.loop_reads:
                self.host.loop.remove_reader(ch.fd)
                ch.loop_reads = False
            ch.sock.close()
        finally:
            ch.read_lock.release()
        st = self.actor_of.pop(ch, None)
        if st is not None:
            if st.side is ch:
                st.side = None
            self.submitter.flush_locked(st)


def _settles_here(st: Any, spec: TaskSpec, reply: dict) -> bool:
    """Whether a reply read on the calling thread can be settled there: success, small
    values, nothing that only the I/O thread may do (retries and lineage, objects in the
    store, releasing object arguments, ending the actor)."""
    if reply.get("error") or st.ending or spec.max_retries or spec.nested_refs:
        return False
    if spec.args and spec.arg_refs():
        return False
    contained = reply.get("contained")
    if contained and any(contained):
        return False
    return all(loc[0] == "inline" for loc in reply["returns"])
