"""The worker's side of a caller's own channel (``served_channels.py``): the thread that runs
a plain actor's calls, or a leased worker's tasks, reads the channel itself. What must hold:
it is asked for and granted only where that thread runs the calls in order (not a threaded
or async actor), calls waiting unread in the channel still run before the actor exits when
its handles are gone, can be cancelled, fail at once when the actor is killed, and a channel
that ends (closed by its caller, or its driver SIGKILLed) leaves no socket behind in the
worker, which goes on serving others."""

from __future__ import annotations

import asyncio
import os
import textwrap
import time

import ember
import psutil
import pytest
from ember import global_state
from ember.exceptions import ActorDiedError, TaskCancelledError
from ember_test_utils import own_channel_driver, sigkill_driver_when_ready, wait_until

pytestmark = pytest.mark.timeout(240)


@ember.remote
class Box:
    def __init__(self) -> None:
        self.seen: list[int] = []

    def add(self, i: int) -> int:
        self.seen.append(i)
        return i

    def seen_so_far(self) -> list[int]:
        return self.seen

    def pid(self) -> int:
        return os.getpid()

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds


@ember.remote(max_concurrency=2)
class Threaded:
    def pid(self) -> int:
        return os.getpid()


@ember.remote
class AsyncBox:
    async def pid(self) -> int:
        await asyncio.sleep(0)
        return os.getpid()


@ember.remote
def pid_of() -> int:
    return os.getpid()


@pytest.fixture(scope="module")
def own():
    with own_channel_driver(lease_idle_seconds=5.0) as own:
        yield own


def _channel(actor, call=None):
    """Sync calls until the caller's channel to ``actor`` is open; the channel."""
    submitter = global_state.worker.actor_submitter
    for _ in range(30):
        ember.get((call or actor.pid).remote(), timeout=60)
        st = submitter._actors[actor._actor_id]
        if st.side is not None:
            return st.side
    raise AssertionError(
        f"no channel after 30 sync calls: {global_state.worker.own_replies.counts}"
    )


def test_served_on_thread_only_where_one_thread_runs_the_calls(own):
    assert _channel(Box.remote()).served_on_thread
    assert not _channel(Threaded.remote()).served_on_thread  # its calls run on a pool
    assert not _channel(AsyncBox.remote()).served_on_thread  # on its event loop
    for _ in range(30):  # a leased worker's tasks: served too
        ember.get(pid_of.remote(), timeout=60)
        submitter = global_state.worker.task_submitter
        sides = [
            lease.side for c in submitter._classes.values() for lease in c.leases if lease.side
        ]
        if sides:
            break
    assert sides and all(ch.served_on_thread for ch in sides)


def test_calls_waiting_in_the_channel_run_before_the_actor_exits(own):
    box = Box.remote()
    _channel(box)
    pid = ember.get(box.pid.remote(), timeout=30)
    refs = [box.add.remote(i) for i in range(100)]  # on the channel, most unread when...
    del box  # ...the last handle goes: the actor ends after the calls it was sent
    assert ember.get(refs, timeout=60) == list(range(100))
    wait_until(lambda: not psutil.pid_exists(pid), 30, message="the actor's worker exits")


def test_a_call_waiting_in_the_channel_can_be_cancelled(own):
    box = Box.remote()
    _channel(box)
    running = box.sleep.remote(1.0)
    waiting = box.add.remote(5)  # unread in the channel while the sleep runs
    time.sleep(0.2)
    ember.cancel(waiting)
    assert ember.get(running, timeout=30) == 1.0
    with pytest.raises(TaskCancelledError):
        ember.get(waiting, timeout=30)
    assert ember.get(box.add.remote(6), timeout=30) == 6
    assert ember.get(box.seen_so_far.remote(), timeout=30) == [6]


def test_kill_fails_the_calls_waiting_in_the_channel_at_once(own):
    box = Box.remote()
    _channel(box)
    running = box.sleep.remote(30)
    waiting = box.add.remote(1)
    time.sleep(0.2)
    start = time.monotonic()
    ember.kill(box)
    for ref in (running, waiting):
        with pytest.raises(ActorDiedError):
            ember.get(ref, timeout=30)
    assert time.monotonic() - start < 15


def test_closed_channels_leave_no_socket_in_the_worker(own, monkeypatch):
    from ember.core_worker import own_replies

    monkeypatch.setattr(own_replies, "IDLE_CLOSE_S", 0.2)
    box = Box.remote()
    worker = psutil.Process(ember.get(box.pid.remote(), timeout=30))
    for _ in range(2):  # (the worker's other connections, as to the agent, open meanwhile)
        first = _channel(box)
        wait_until(lambda ch=first: ch.sock.fileno() == -1, 10, message="the channel closed")
        time.sleep(1.5)
    baseline = worker.num_fds()
    for _ in range(5):
        ch = _channel(box)
        assert ch.served_on_thread
        wait_until(lambda ch=ch: ch.sock.fileno() == -1, 10, message="the idle channel closed")
    wait_until(
        lambda: worker.num_fds() <= baseline,
        10,
        message=lambda: f"the worker's fds back to {baseline}: {worker.num_fds()}",
    )
    assert ember.get(box.add.remote(3), timeout=30) == 3


DRIVER = textwrap.dedent(
    """
    import sys, ember
    from ember import global_state
    ember.init(address=sys.argv[1], namespace="served")
    box = ember.get_actor("served-box")
    st = None
    for i in range(100):
        ember.get(box.pid.remote(), timeout=60)
        st = global_state.worker.actor_submitter._actors[box._actor_id]
        if st.side is not None:
            break
    assert st.side is not None and st.side.served_on_thread
    print("ready", flush=True)
    while True:
        ember.get(box.add.remote(1), timeout=60)
    """
)


def test_a_driver_sigkilled_mid_loop_leaves_the_actor_serving_others(own):
    box = Box.options(name="served-box", namespace="served", lifetime="detached").remote()
    try:
        worker = psutil.Process(ember.get(box.pid.remote(), timeout=30))
        time.sleep(1.5)  # (its first event flush opens its connection to the agent)
        baseline = worker.num_fds()
        address = ember.get_runtime_context().gcs_address
        sigkill_driver_when_ready(DRIVER, [address], "ready")
        # The worker sees the channel end, closes its side and serves this driver on.
        assert ember.get(box.add.remote(2), timeout=30) == 2
        assert _channel(box).served_on_thread
        wait_until(
            lambda: worker.num_fds() <= baseline + 2,  # (this driver's two connections)
            15,
            message=lambda: f"the worker's fds back near {baseline}: {worker.num_fds()}",
        )
        assert worker.is_running()
    finally:
        ember.kill(box)
