"""A driver thread reading its own actor calls' replies (``own_replies.py``, switched on by
``EMBER_OWN_REPLY_CHANNEL``): every semantic of the main connection holds — values and
errors, order per caller with other threads calling the same actor, results others wait
on, calls never waited on, get's timeout, a worker SIGKILLed mid-call (retried on the
restarted actor, or failed) — and the common case is settled on the calling thread."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import ember
import pytest
from ember import global_state
from ember.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError
from ember_test_utils import kill_soon, own_channel_driver, process_gone, wait_until

pytestmark = pytest.mark.timeout(240)


@ember.remote
class Log:
    def __init__(self) -> None:
        self.seen: list = []

    def add(self, who: str, i: int) -> int:
        self.seen.append((who, i))
        return i

    def seen_so_far(self) -> list:
        return self.seen

    def pid(self) -> int:
        return os.getpid()

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    def big(self) -> bytes:
        return b"x" * 3_000_000

    def echo(self, value):
        return value

    def fail(self) -> None:
        raise ValueError("boom from the actor")


@pytest.fixture(scope="module")
def own():
    with own_channel_driver() as own:
        yield own


def _channel_of(actor):
    st = global_state.worker.actor_submitter._actors[actor._actor_id]
    return st


def _sync_caller_of(actor) -> None:
    """Calls waited on one by one until the actor's channel is open: the first one sent on
    the main connection and waited on alone shows a sync caller (own_replies.py)."""
    st = None
    for _ in range(20):
        ember.get(actor.pid.remote(), timeout=60)
        st = _channel_of(actor)
        if st.side is not None:
            return
    raise AssertionError(f"no channel after 20 sync calls (shared: {st.shared_process})")


def test_bursts_to_many_actors_open_no_channels(own):
    actors = [Log.remote() for _ in range(20)]
    sent = own.counts["sent"]
    for _ in range(3):
        assert len(set(ember.get([a.pid.remote() for a in actors], timeout=60))) == 20
    assert own.counts["sent"] == sent
    assert all(_channel_of(a).side is None for a in actors)


def test_a_sync_loop_reads_its_replies_on_its_own_thread(own):
    from ember.util import state

    log = Log.remote()
    _sync_caller_of(log)
    sent, here = own.counts["sent"], own.counts["settled_here"]
    for i in range(200):
        assert ember.get(log.add.options(name="own_loop").remote("main", i), timeout=30) == i
    assert own.counts["sent"] - sent == 200
    assert own.counts["settled_here"] - here == 200
    assert ember.get(log.seen_so_far.remote(), timeout=30) == [("main", i) for i in range(200)]
    st = _channel_of(log)
    assert st.side is not None, (own.counts, own.actor_of, st.state, st.address)

    def finished():  # the calls' rows, as the main connection's calls end up
        rows = state.list_tasks(filters=[("name", "=", "own_loop")], limit=500)
        done = [r for r in rows if r.state == "FINISHED"]
        return done if len(done) == 200 else None

    assert wait_until(finished, 60, interval=0.5, message="200 FINISHED rows")


def test_errors_and_large_values_are_settled_by_the_loop(own):
    log = Log.remote()
    _sync_caller_of(log)
    sent, to_loop = own.counts["sent"], own.counts["to_loop"]
    with pytest.raises(ValueError, match="boom from the actor"):
        ember.get(log.fail.remote(), timeout=30)
    assert ember.get(log.big.remote(), timeout=30) == b"x" * 3_000_000
    assert own.counts["sent"] - sent == 2
    assert own.counts["to_loop"] - to_loop == 2
    # an object argument (inlined when small, by reference when large)
    assert ember.get(log.echo.remote(ember.put([1, 2, 3])), timeout=30) == [1, 2, 3]
    large = ember.put(b"y" * 2_000_000)
    assert ember.get(log.echo.remote(large), timeout=30) == b"y" * 2_000_000


def test_order_per_caller_holds_with_another_thread_and_a_burst(own):
    log = Log.remote()
    _sync_caller_of(log)

    def other() -> None:
        for j in range(150):
            ember.get(log.add.remote("other", j), timeout=30)

    thread = threading.Thread(target=other)
    thread.start()
    for i in range(150):
        ember.get(log.add.remote("main", i), timeout=30)
    burst = [log.add.remote("burst", k) for k in range(300)]  # on the channel, unread
    ember.get(log.add.remote("main", 150), timeout=30)  # read here, past the burst's replies
    assert ember.get(burst, timeout=60) == list(range(300))
    thread.join(60)
    seen = ember.get(log.seen_so_far.remote(), timeout=30)
    assert len(seen) == 601
    for who, count in (("main", 151), ("other", 150), ("burst", 300)):
        assert [i for w, i in seen if w == who] == list(range(count)), who
    # the burst ran between the main thread's 150th and 151st calls
    main_at = [n for n, (w, _) in enumerate(seen) if w == "main"]
    burst_at = [n for n, (w, _) in enumerate(seen) if w == "burst"]
    assert main_at[149] < burst_at[0] and burst_at[-1] < main_at[150]


def test_another_thread_waiting_on_a_result_gets_it(own):
    log = Log.remote()
    _sync_caller_of(log)
    taken = own.counts["taken_over"]
    ref = log.sleep.remote(0.5)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(ember.get(ref, timeout=30)))
    waiter.start()
    waiter.join(40)
    assert got == [0.5]
    assert own.counts["taken_over"] > taken
    assert ember.get(ref, timeout=5) == 0.5  # and here, from the store


def test_a_call_never_waited_on_still_ends(own):
    from ember.util import state

    log = Log.remote()
    _sync_caller_of(log)
    sent = own.counts["sent"]
    log.add.options(name="never_waited").remote("ff", 1)  # ref dropped at once
    assert own.counts["sent"] == sent + 1

    def finished():
        rows = state.list_tasks(filters=[("name", "=", "never_waited")], limit=10)
        return [r for r in rows if r.state == "FINISHED"]

    assert wait_until(finished, 30, interval=0.2, message="the unread call's FINISHED row")
    assert ember.get(log.seen_so_far.remote(), timeout=30) == [("ff", 1)]


def test_get_times_out_then_gets_the_value(own):
    log = Log.remote()
    _sync_caller_of(log)
    ref = log.sleep.remote(1.0)
    start = time.monotonic()
    with pytest.raises(GetTimeoutError):
        ember.get(ref, timeout=0.2)
    assert time.monotonic() - start < 0.9
    assert ember.get(ref, timeout=30) == 1.0
    assert ember.get(log.add.remote("after", 1), timeout=30) == 1


def test_a_worker_killed_mid_call_retries_on_the_restarted_actor(own):
    log = Log.options(max_restarts=1, max_task_retries=1).remote()
    _sync_caller_of(log)
    pid = ember.get(log.pid.remote(), timeout=60)
    st = _channel_of(log)
    assert st.side is not None, (own.counts, own.actor_of, st.state, st.address)
    killer = kill_soon(pid, 0.5)
    assert ember.get(log.sleep.remote(1.5), timeout=90) == 1.5  # the attempt on the new worker
    killer.join(10)
    assert process_gone(pid)
    new_pid = ember.get(log.pid.remote(), timeout=60)
    assert new_pid != pid
    assert ember.get(log.add.remote("again", 1), timeout=30) == 1
    st = _channel_of(log)
    wait_until(lambda: st.side is None or not st.side.close_reason, 10, message="a live channel")


def test_a_worker_killed_mid_call_fails_the_call_when_the_actor_cannot_restart(own):
    log = Log.options(max_restarts=0).remote()
    _sync_caller_of(log)
    pid = ember.get(log.pid.remote(), timeout=60)
    st = _channel_of(log)
    assert st.side is not None, (own.counts, own.actor_of, st.state, st.address)
    killer = kill_soon(pid, 0.5)
    start = time.monotonic()
    with pytest.raises((ActorDiedError, ActorUnavailableError)):
        ember.get(log.sleep.remote(30), timeout=60)
    assert time.monotonic() - start < 20
    killer.join(10)
    st = _channel_of(log)
    wait_until(lambda: st.side is None, 10, message="the dead actor's channel closed")
    # the driver goes on with other actors
    other = Log.remote()
    assert ember.get(other.add.remote("next", 2), timeout=60) == 2


def test_an_idle_channel_is_closed_and_a_new_one_opened_when_needed(own, monkeypatch):
    from ember.core_worker import own_replies

    monkeypatch.setattr(own_replies, "IDLE_CLOSE_S", 0.3)
    log = Log.remote()
    _sync_caller_of(log)
    assert ember.get(log.add.remote("a", 1), timeout=30) == 1
    st = _channel_of(log)
    first = st.side
    assert first is not None
    wait_until(lambda: st.side is None, 10, message="the idle channel closed")
    wait_until(lambda: first.sock.fileno() == -1, 10, message="its socket closed")
    assert ember.get(log.add.remote("b", 2), timeout=30) == 2  # on the main connection
    _sync_caller_of(log)  # waited on one by one again: a new channel
    assert st.side is not None and st.side is not first


def test_shared_process_actors_keep_the_main_connection(own):
    guests = [Log.options(shared_process=True, num_cpus=0).remote() for _ in range(3)]
    ember.get([g.pid.remote() for g in guests], timeout=60)
    sent = own.counts["sent"]
    for i in range(20):
        for g in guests:
            assert ember.get(g.add.remote("guest", i), timeout=30) == i
    assert own.counts["sent"] == sent  # a socket per guest would cost its host one each
    assert all(_channel_of(g).side is None for g in guests)


@ember.remote
class Poller:
    async def poll(self, seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    async def quick(self, i: int) -> int:
        return i


def test_a_long_call_from_another_thread_does_not_hold_back_this_threads_calls(own):
    # An async actor runs calls side by side (Ray's rule: no order among them): a long poll
    # pending from one thread must not make another thread's calls wait for it.
    poller = Poller.remote()
    for _ in range(20):  # until the channel is open (a sync caller seen)
        assert ember.get(poller.quick.remote(0), timeout=60) == 0
        if _channel_of(poller).side is not None:
            break
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(ember.get(poller.poll.remote(4.0))))
    waiter.start()
    time.sleep(0.3)  # the poll is out
    start = time.monotonic()
    for i in range(20):
        assert ember.get(poller.quick.remote(i), timeout=30) == i
    assert time.monotonic() - start < 3.0, "the quick calls waited for the long poll"
    waiter.join(30)
    assert got == [4.0]


def test_an_interrupt_while_settling_a_reply_loses_no_value(own, monkeypatch):
    # Ctrl-C lands on the main thread, which settles its calls' replies itself: here right
    # after the call was taken off in_flight, before its value was stored. The interrupt
    # goes up to the caller; the value still reaches the ref, and the channel goes on.
    log = Log.remote()
    _sync_caller_of(log)
    worker = global_state.worker
    real = worker.handle_task_reply
    interrupted: list = []

    def interrupt_once(spec, reply, retry):
        if not interrupted:
            interrupted.append(spec.task_id)
            raise KeyboardInterrupt
        return real(spec, reply, retry)

    monkeypatch.setattr(worker, "handle_task_reply", interrupt_once)
    ref = log.add.remote("main", 1)
    with pytest.raises(KeyboardInterrupt):
        ember.get(ref, timeout=30)
    assert interrupted == [ref.task_id()]
    assert ember.get(ref, timeout=10) == 1
    assert [ember.get(log.add.remote("main", i), timeout=30) for i in (2, 3, 4)] == [2, 3, 4]
    assert _channel_of(log).side is not None
