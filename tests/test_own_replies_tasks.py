"""A driver thread reading its own normal tasks' replies (``own_replies.py`` with
``task_submitter.py``): a task pushed by the caller's thread to an idle lease goes on the
thread's own channel to that worker once the caller is seen waiting on its tasks one by one,
and every semantic of the main connection holds — values, rows that say where each task ran,
errors and retries, a worker SIGKILLed mid-task (retried elsewhere, or failed), cancel,
results other threads wait on, tasks never waited on, get's timeout, the lease going back
after its idle hold — while the common case is settled on the calling thread."""

from __future__ import annotations

import os
import threading
import time

import ember
import pytest
from ember import config, global_state
from ember.exceptions import GetTimeoutError, TaskCancelledError, WorkerCrashedError
from ember_test_utils import kill_soon, own_channel_driver, process_gone, wait_until

pytestmark = pytest.mark.timeout(240)


@ember.remote
def pid_of(i: int = 0) -> tuple[int, int]:
    return i, os.getpid()


@ember.remote
def sleeper(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


@ember.remote
def fails() -> None:
    raise ValueError("boom from the task")


@ember.remote
def big() -> bytes:
    return b"x" * 3_000_000


@ember.remote
def echo(value):
    return value


@ember.remote(max_retries=2, retry_exceptions=True)
def fails_once(marker: str) -> str:
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("first attempt fails")
    return "second attempt"


@pytest.fixture(scope="module")
def own():
    # Idle leases held 5 s, not 50 ms: a busy machine can pass 50 ms between a reply and the
    # next submit, and the task would then rightly take the I/O thread's path.
    with own_channel_driver(lease_idle_seconds=5.0) as own:
        yield own


def _leases() -> list:
    submitter = global_state.worker.task_submitter
    with submitter.lock:
        return [lease for cls in submitter._classes.values() for lease in cls.leases]


def _channels() -> list:
    return [lease.side for lease in _leases() if lease.side is not None]


def _sync_caller(**options) -> int:
    """Tasks waited on one by one until a lease's channel is open: the first one pushed on
    the main connection and waited on alone shows a sync caller. With ``options`` (their
    own resource shape: a scheduling class, and so leases, of their own), the pid of the
    one worker of that class, whose channel is open."""
    for _ in range(40):
        _, pid = ember.get(pid_of.options(**options).remote(), timeout=60)
        if any(lease.pid == pid for lease in _leases() if lease.side is not None):
            return pid
    raise AssertionError(
        f"no channel after 40 sync tasks: {global_state.worker.own_replies.counts}"
    )


def test_a_sync_loop_of_tasks_reads_its_replies_on_its_own_thread(own):
    from ember.util import state

    _sync_caller()
    sent, here = own.counts["sent"], own.counts["settled_here"]
    pids = {}
    for i in range(200):
        value, pid = ember.get(pid_of.options(name="own_task_loop").remote(i), timeout=30)
        assert value == i
        pids[i] = pid
    # A task misses the idle lease only if its predecessor's reply is not settled yet; on
    # the channel it always is by the time get returns.
    assert own.counts["sent"] - sent >= 195, own.counts
    assert own.counts["settled_here"] - here >= 195, own.counts

    # Their rows end FINISHED, placed on the worker that answered, as the loop's path does.
    def finished():
        rows = state.list_tasks(filters=[("name", "=", "own_task_loop")], limit=500, detail=True)
        done = [r for r in rows if r.state == "FINISHED"]
        return done if len(done) == 200 else None

    rows = wait_until(finished, 60, interval=0.5, message="200 FINISHED rows")
    assert {r.worker_pid for r in rows} == set(pids.values())
    assert all(r.attempt_number == 0 for r in rows)


def test_errors_retries_large_values_and_object_args_go_by_the_loop(own, tmp_path):
    _sync_caller()
    sent, to_loop = own.counts["sent"], own.counts["to_loop"]
    with pytest.raises(ValueError, match="boom from the task"):
        ember.get(fails.remote(), timeout=30)
    assert ember.get(big.remote(), timeout=30) == b"x" * 3_000_000
    assert ember.get(fails_once.remote(str(tmp_path / "marker")), timeout=60) == "second attempt"
    assert own.counts["sent"] - sent >= 2, own.counts
    assert own.counts["to_loop"] - to_loop >= 2, own.counts
    assert ember.get(echo.remote(ember.put([1, 2, 3])), timeout=30) == [1, 2, 3]
    large = ember.put(b"y" * 2_000_000)
    assert ember.get(echo.remote(large), timeout=30) == b"y" * 2_000_000
    assert ember.get(pid_of.remote(7), timeout=30)[0] == 7  # and the loop goes on


def test_another_thread_waiting_on_a_task_gets_it(own):
    _sync_caller()
    taken = own.counts["taken_over"]
    ref = sleeper.remote(0.5)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(ember.get(ref, timeout=30)))
    waiter.start()
    waiter.join(40)
    assert len(got) == 1 and isinstance(got[0], int)
    assert own.counts["taken_over"] > taken
    assert ember.get(ref, timeout=5) == got[0]  # and here, from the store


def test_a_task_never_waited_on_still_ends(own, tmp_path):
    from ember.util import state

    _sync_caller()
    sent = own.counts["sent"]
    marker = tmp_path / "ran"
    echo.options(name="never_waited_task").remote(str(marker))  # ref dropped at once
    assert own.counts["sent"] == sent + 1

    def finished():
        rows = state.list_tasks(filters=[("name", "=", "never_waited_task")], limit=10)
        return [r for r in rows if r.state == "FINISHED"]

    assert wait_until(finished, 30, interval=0.2, message="the unread task's FINISHED row")


def test_get_times_out_then_gets_the_value(own):
    _sync_caller()
    ref = sleeper.remote(1.0)
    start = time.monotonic()
    with pytest.raises(GetTimeoutError):
        ember.get(ref, timeout=0.2)
    assert time.monotonic() - start < 0.9
    assert isinstance(ember.get(ref, timeout=30), int)
    assert ember.get(pid_of.remote(3), timeout=30)[0] == 3


def test_cancel_of_a_task_running_on_the_channel(own):
    _sync_caller()
    sent = own.counts["sent"]
    ref = sleeper.remote(30)
    assert own.counts["sent"] == sent + 1  # on the channel
    time.sleep(0.5)  # running
    start = time.monotonic()
    ember.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ember.get(ref, timeout=30)
    assert time.monotonic() - start < 10
    assert ember.get(pid_of.remote(4), timeout=30)[0] == 4


def test_a_worker_killed_mid_task_retries_it_elsewhere(own):
    from ember.util import state

    pid = _sync_caller(num_cpus=0.25)
    sent = own.counts["sent"]
    killer = kill_soon(pid, 0.5)
    ref = sleeper.options(name="killed_on_channel", num_cpus=0.25).remote(1.5)
    assert own.counts["sent"] == sent + 1  # on the channel to the worker about to die
    new_pid = ember.get(ref, timeout=90)  # the retry, on another worker
    killer.join(10)
    assert process_gone(pid)
    assert new_pid != pid

    def attempts():
        rows = state.list_tasks(filters=[("name", "=", "killed_on_channel")], detail=True)
        ended = {r.attempt_number: r for r in rows if r.state in ("FINISHED", "FAILED")}
        return ended if set(ended) == {0, 1} else None

    rows = wait_until(attempts, 30, message="both attempts ended")
    assert rows[0].state == "FAILED" and rows[1].state == "FINISHED"
    assert rows[1].worker_pid == new_pid
    assert rows[0].worker_pid == pid  # the failed attempt is placed where it ran
    assert ember.get(pid_of.remote(5), timeout=30)[0] == 5


def test_a_worker_killed_mid_task_fails_it_without_retries(own):
    pid = _sync_caller(num_cpus=0.125, max_retries=0)  # (retriable or not: a class apart)
    sent = own.counts["sent"]
    killer = kill_soon(pid, 0.5)
    ref = sleeper.options(max_retries=0, num_cpus=0.125).remote(30)
    assert own.counts["sent"] == sent + 1
    start = time.monotonic()
    with pytest.raises(WorkerCrashedError):
        ember.get(ref, timeout=60)
    assert time.monotonic() - start < 20
    killer.join(10)
    wait_until(lambda: not any(ch.pending for ch in _channels()), 10)
    assert ember.get(pid_of.remote(6), timeout=60)[0] == 6


def test_the_lease_going_back_closes_its_channel(own, monkeypatch):
    _sync_caller()
    channels = _channels()
    assert channels
    monkeypatch.setattr(config, "lease_idle_seconds", 0.05)
    ember.get(pid_of.remote(), timeout=30)  # held 50 ms after this one, then back
    wait_until(lambda: not _leases(), 20, message="the idle lease went back")
    wait_until(
        lambda: all(ch.sock.fileno() == -1 for ch in channels), 10, message="channels closed"
    )
    assert not _channels()
    assert ember.get(pid_of.remote(8), timeout=60)[0] == 8


def test_an_interrupt_while_settling_a_task_reply_loses_no_value_nor_the_lease(own, monkeypatch):
    # Ctrl-C on the main thread after its task's lease was freed and before the value was
    # stored (complete_task): the value still reaches the ref, and the lease serves the
    # next tasks (it is not left leased and unused).
    pid = _sync_caller(num_cpus=0.5)
    worker = global_state.worker
    real = worker.complete_task
    interrupted: list = []

    def interrupt_once(spec, reply):
        if not interrupted:
            interrupted.append(spec.task_id)
            raise KeyboardInterrupt
        return real(spec, reply)

    monkeypatch.setattr(worker, "complete_task", interrupt_once)
    ref = pid_of.options(num_cpus=0.5).remote(7)
    with pytest.raises(KeyboardInterrupt):
        ember.get(ref, timeout=30)
    assert interrupted == [ref.task_id()]
    assert ember.get(ref, timeout=10) == (7, pid)
    monkeypatch.setattr(worker, "complete_task", real)
    after = [ember.get(pid_of.options(num_cpus=0.5).remote(i), timeout=30) for i in range(3)]
    assert after == [(0, pid), (1, pid), (2, pid)]
