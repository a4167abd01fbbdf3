"""A task whose class has an idle leased worker is pushed by the caller's own thread
(``TaskSubmitter.submit_direct``), not handed to the I/O thread first: every semantic of the
loop's path holds (values, where its row says it ran, retries when the worker is gone,
cancel, the lease going back after its idle hold), including with several threads
submitting at once."""

from __future__ import annotations

import os
import signal
import threading
import time

import ember
import pytest
from ember import config, global_state
from ember.exceptions import TaskCancelledError
from ember_test_utils import process_gone, wait_until


@ember.remote
def pid_of(i: int = 0) -> tuple[int, int]:
    return i, os.getpid()


@ember.remote
def sleeper(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def _submitter():
    return global_state.worker.task_submitter


@pytest.fixture
def long_hold(monkeypatch):
    """Idle leases held 5 s, not 50 ms: a busy machine can pass 50 ms between a reply and
    the next submit, and the task would then rightly take the I/O thread's path."""
    monkeypatch.setattr(config, "lease_idle_seconds", 5.0)


def test_a_loop_of_sync_tasks_is_pushed_from_the_callers_thread(shared_node, long_hold):
    from ember.util import state

    ember.get(pid_of.remote())  # a lease held, idle
    before = _submitter().stats()["direct"]
    pids = set()
    for i in range(200):
        value, pid = ember.get(pid_of.options(name="direct_loop").remote(i), timeout=30)
        assert value == i
        pids.add(pid)
    # Most went straight from this thread (one may miss the lease while its reply is
    # handled, and take the I/O thread's path).
    assert _submitter().stats()["direct"] - before >= 150

    # Their rows say where they ran, as the loop's path does: the worker that answered.
    def rows():
        found = state.list_tasks(filters=[("name", "=", "direct_loop")], limit=500)
        done = [r for r in found if r.state == "FINISHED"]
        return done if len(done) == 200 else None

    finished = wait_until(rows, 30, message="200 FINISHED rows of the loop")
    assert {r.worker_pid for r in finished} <= pids
    assert all(r.attempt_number == 0 for r in finished)


def test_threads_submitting_at_once_each_get_their_own_values(shared_node):
    errors: list[BaseException] = []

    def loop(base: int) -> None:
        try:
            for i in range(100):
                assert ember.get(pid_of.remote(base + i), timeout=60)[0] == base + i
        except BaseException as e:  # reported below, on the test's thread
            errors.append(e)

    threads = [threading.Thread(target=loop, args=(k * 1000,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a submitting thread hung"
    assert not errors, errors


def test_a_task_sent_to_a_worker_killed_while_idle_runs_again(shared_node):
    _, pid = ember.get(pid_of.remote(), timeout=30)
    os.kill(pid, signal.SIGKILL)
    # At once: the owner may not have seen the socket close, and push to the dead worker.
    value, ran_on = ember.get(pid_of.remote(7), timeout=60)
    assert value == 7 and ran_on != pid
    wait_until(lambda: process_gone(pid), 15, message=f"the end of {pid}")


def test_a_directly_pushed_running_task_can_be_cancelled(shared_node, long_hold):
    ember.get(pid_of.remote(), timeout=30)
    before = _submitter().stats()["direct"]
    ref = sleeper.remote(30.0)
    assert _submitter().stats()["direct"] == before + 1
    time.sleep(0.2)  # it starts (a cancel before the start is the queue's case)
    ember.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ember.get(ref, timeout=30)


def test_an_idle_lease_taken_directly_still_goes_back_after_its_hold(shared_node):
    # (Its idle timer, left running when the caller's thread took it, must neither return
    # it while busy nor keep it past the hold that follows its next reply.)
    for i in range(20):
        ember.get(pid_of.remote(i), timeout=30)
    hold = config.lease_idle_seconds
    wait_until(
        lambda: _submitter().stats()["leases"] == 0,
        hold + 15,
        message=f"the idle leases to go back after their {hold} s hold",
    )
    total = ember.cluster_resources().get("CPU", 0)
    wait_until(
        lambda: ember.available_resources().get("CPU", 0) == total,
        15,
        message="the node's CPUs to be free again",
    )


def test_the_switch_off_hands_every_task_to_the_io_thread(shared_node, long_hold, monkeypatch):
    monkeypatch.setattr(config, "direct_task_submit", False)  # EMBER_DIRECT_TASK_SUBMIT=0
    ember.get(pid_of.remote(), timeout=30)
    before = _submitter().stats()["direct"]
    assert [ember.get(pid_of.remote(i), timeout=30)[0] for i in range(20)] == list(range(20))
    assert _submitter().stats()["direct"] == before
