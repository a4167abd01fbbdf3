"""Calls whose replies the calling thread reads itself: a driver's actor calls and normal
tasks to workers on its node, on the thread's own channel to that worker
(``reply_channel.py``, which says why).

Two submitters use it, each for what it sends (``actor_submitter.py``: calls to an actor;
``task_submitter.py``: a task pushed by the user's thread to an idle lease), and each decides
which of its calls may go there and what a reply read on the calling thread may settle
(``settle_own``): the common case, a success with small values, settles right there; anything
else (errors, retries, objects in the store, a lost worker) goes to the I/O thread, which
settles it as it settles the main connection's replies. A target (an actor's state or a
lease) carries ``side`` (its channel, while it has one), ``sync_hint`` and ``address``.

A channel is opened only for a caller seen waiting on its calls one at a time
(``note_single_wait`` sets the target's ``sync_hint``): a burst waited on together gains
nothing from a socket of its own. Not from the I/O thread, and only to Unix sockets (same
node: no token).

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
    def __init__(self, host: Any) -> None:
        self.host = host
        self.calls: dict[bytes, tuple[ReplyChannel, int]] = {}  # task id -> (channel, rid)
        # channel -> (the submitter that sends there, its target: an actor's state or a lease)
        self.target_of: dict[ReplyChannel, tuple[Any, Any]] = {}
        # {thread: (task id, target) of its last call on a main connection}
        self.last_main: dict[int, tuple[bytes, Any]] = {}
        # sent: calls sent on a channel; settled_here: replies settled on the calling thread;
        # to_loop: replies the loop settled; taken_over: hand-overs of a channel to the loop
        self.counts = {"sent": 0, "settled_here": 0, "to_loop": 0, "taken_over": 0}

    # -- the user's thread, under the submitter's lock ---------------------------------------
    def usable(self, target: Any) -> bool:
        """Whether this thread's next call to ``target`` may go on a channel (the submitter
        checks what is its own: streaming generators, calls in flight elsewhere)."""
        if not (target.address or "").startswith(UNIX):
            return False
        io = self.host.io_thread
        if io is not None and threading.get_ident() == io.ident:
            return False
        ch = target.side
        if ch is None:  # opened for a caller seen waiting on its calls one at a time
            return target.sync_hint
        # Any thread may send on it (one at a time: the submitter's lock is held), so a call
        # never waits behind another thread's (a long poll on an async actor); only the
        # thread that opened it reads it itself, the others' waits hand it to the loop.
        return not ch.closed and not ch.close_reason

    def send(self, submitter: Any, target: Any, spec: TaskSpec, op: str) -> bool:
        """Sends ``spec`` as ``op`` on the target's channel (opening it first). False, nothing
        sent."""
        ch = target.side
        if ch is None:
            try:
                ch = ReplyChannel.open(
                    target.address[len(UNIX) :],
                    threading.get_ident(),
                    self._on_reply,
                    self._on_closed,
                    self._on_interrupted,
                )
            except OSError:
                return False
            self.target_of[ch] = (submitter, target)
            target.side = ch
        rid = ch.reserve(spec)
        self.calls[spec.task_id] = (ch, rid)  # a return id's first bytes are its task's id
        if ch.write(rid, op, spec.to_wire()):
            self.counts["sent"] += 1
            return True
        self._forget(spec)
        return False

    def note_main_call(self, target: Any, spec: TaskSpec) -> None:
        """A call this thread sent on a main connection (for ``note_single_wait``)."""
        self.last_main[threading.get_ident()] = (spec.task_id, target)

    # -- the user's thread, waiting ------------------------------------------------------------
    def note_single_wait(self, object_id: bytes) -> None:
        """This thread waits in a single-ref ``get`` for the call it just sent on a main
        connection: a sync caller, which the target's own channel will serve from its next
        call."""
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
        entry = self.target_of.get(ch)
        if entry is None:
            return
        submitter, target = entry
        if submitter.settle_own(ch, target, spec, reply, exc, on_loop):
            self.counts["settled_here"] += 1
        else:
            self.counts["to_loop"] += 1

    def _on_interrupted(
        self, ch: ReplyChannel, spec: TaskSpec, reply: Any, exc: BaseException | None
    ) -> None:
        """``_on_reply`` raised part-way for this reply (Ctrl-C on the main thread): the
        submitter ends the call on the loop, whatever of it was done (``settle_interrupted``:
        settled as the loop settles it if it was not taken yet, else its values stored if
        they are still missing), so no ref waits for a reply already read."""
        self._forget(spec)
        entry = self.target_of.get(ch)
        if entry is not None:
            submitter, target = entry
            self.host.loop.call_soon_threadsafe(
                submitter.settle_interrupted, target, spec, reply, exc
            )

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
        if not self.target_of:
            return
        now = time.monotonic()
        for ch, (submitter, target) in list(self.target_of.items()):
            if ch.closed or ch.loop_reads:
                continue
            if ch.oldest_unread(now) > UNREAD_S:
                self._take_over(ch)
            elif not ch.pending and now - ch.last_used > IDLE_CLOSE_S:
                with submitter.lock:  # no call can be sent on it meanwhile
                    if ch.pending or target.side is not ch:
                        continue
                    target.side = None
                    target.sync_hint = False  # until the caller is seen waiting one by one again
                ch.shutdown("idle")
                ch.closed = True
                self._retire(ch)

    def end(self, target: Any, reason: str) -> None:
        """On the loop, under the submitter's lock: the target's worker is gone, replaced or
        no longer ours; its channel ends (what is pending there is settled as on the main
        connection: the reader sees the end) and is read to its end at once."""
        ch = target.side
        if ch is None:
            return
        ch.shutdown(reason)
        if ch.pending:
            self._take_over(ch)
        elif not ch.closed:
            target.side = None
            ch.closed = True
            self._retire(ch)

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
        entry = self.target_of.pop(ch, None)
        if entry is not None:
            submitter, target = entry
            if target.side is ch:
                target.side = None
            submitter.channel_gone(target)


def store_missing_values(store: Any, spec: TaskSpec, reply: Any) -> None:
    """After an interrupted settle: each inline return still pending in ``store`` (its ref
    still wanted) gets its value; what was stored already stays. Only inline values: the
    rest are settled by the loop's path, which an interrupted caller hands them to first."""
    if not isinstance(reply, dict) or reply.get("error"):
        return
    for object_id, loc in zip(spec.return_ids(), reply.get("returns") or (), strict=False):
        if loc[0] == "inline" and store.contains(object_id) and not store.get_if_ready(object_id):
            store.put(object_id, loc)


def stored_by_caller(spec: TaskSpec, reply: dict) -> bool:
    """Whether a reply read on the calling thread can be settled there, by either
    submitter: a success whose values all came inline with no refs inside them, for a call
    with no object arguments (no plasma pins, no borrowing, no arguments to release: what
    only the I/O thread does)."""
    if reply.get("error") or spec.nested_refs or (spec.args and spec.arg_refs()):
        return False
    contained = reply.get("contained")
    if contained and any(contained):
        return False
    return all(loc[0] == "inline" for loc in reply["returns"])
