"""Short tasks pipelined to leased workers: a task pushed behind a running one keeps every
semantic it has unpipelined. It comes back unstarted (and runs elsewhere, on its first
attempt) when the task ahead runs long, blocks in ``get`` on it, crashes its worker or when
it is cancelled; its retries are untouched."""

from __future__ import annotations

import os
import time

import ember
import pytest
from ember import global_state
from ember.core_worker import task_submitter
from ember.exceptions import TaskCancelledError, WorkerCrashedError
from ember_test_utils import wait_until


@pytest.fixture
def always_pipeline(shared_node, monkeypatch):
    """Every reply counts as short, so the owner pipelines whenever tasks wait (on a busy
    machine a short task's round trip can pass the 2 ms the owner otherwise asks)."""
    monkeypatch.setattr(task_submitter, "PIPELINE_BELOW_S", 60.0)
    return global_state.worker.task_submitter


@ember.remote(max_retries=0)
def pid_of(_i: int = 0) -> int:
    return os.getpid()


@ember.remote(max_retries=0)
def sleep_then_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


@ember.remote(max_retries=0)
def crash() -> None:
    os._exit(3)


@ember.remote
class Mailbox:
    def __init__(self) -> None:
        self.refs: list | None = None

    def put(self, refs: list) -> None:
        self.refs = refs

    def take(self) -> list | None:
        return self.refs


@ember.remote(max_retries=0)
def wait_for_mail(box) -> int:
    # Blocks in get on a task submitted after this one, which its owner may have pushed
    # behind it on this very worker.
    deadline = time.monotonic() + 60
    while (refs := ember.get(box.take.remote())) is None:
        if time.monotonic() > deadline:
            raise TimeoutError("no mail")
        time.sleep(0.01)
    return ember.get(refs[0]) + 1


def _warm(n: int = 40) -> None:
    """Two leases held (a burst of short tasks), the class known to be short."""
    assert len(set(ember.get([pid_of.remote(i) for i in range(n)]))) >= 1


def test_a_burst_of_short_tasks_is_pipelined_and_every_value_is_right(shared_node):
    submitter = global_state.worker.task_submitter
    before = submitter.stats()["pipelined"]

    @ember.remote
    def square(x):
        return x * x

    for _ in range(3):
        assert ember.get([square.remote(i) for i in range(2000)]) == [i * i for i in range(2000)]
    # Not forced: the owner's own measure of "short" held for most of these.
    assert submitter.stats()["pipelined"] - before > 1000


def test_a_task_behind_a_long_one_runs_elsewhere_on_its_first_attempt(always_pipeline):
    from ember.util import state

    given_back = always_pipeline.stats()["given_back"]
    _warm()
    # Both leases busy for a while, so the two below queue behind them (a lease free when
    # they are submitted would take one straight away, unpipelined); the first to free
    # takes the slow one, and the quick one is pushed behind it.
    refs = [sleep_then_pid.remote(0.3) for _ in range(2)]
    slow = sleep_then_pid.remote(3.0)
    quick = pid_of.options(name="behind_slow").remote(99)
    started = time.monotonic()
    ready, _ = ember.wait([slow, quick], num_returns=1, timeout=30)
    assert ready == [quick], "the quick task waited for the slow one ahead of it"
    assert time.monotonic() - started < 2.5
    stats = always_pipeline.stats()
    assert stats["given_back"] > given_back
    # Running now: the slow one alone (the quick one is done, and nothing is held).
    assert (stats["running"], stats["held"]) == (1, 0), stats
    quick_pid, slow_pid = ember.get(quick), ember.get(slow)
    assert quick_pid != slow_pid
    ember.get(refs)

    def row():
        rows = state.list_tasks(filters=[("name", "=", "behind_slow")], limit=10)
        return rows[0] if rows and rows[0].state == "FINISHED" else None

    finished = wait_until(row, 30, message="the quick task's row to be FINISHED")
    # The row names where it ran, as its first attempt: a give-back is not a retry.
    assert finished.worker_pid == quick_pid
    assert finished.attempt_number == 0


def test_a_task_blocked_on_the_one_behind_it_does_not_deadlock(always_pipeline):
    box = Mailbox.remote()
    _warm()
    shorts = [pid_of.remote(i) for i in range(3)]
    waiter = wait_for_mail.remote(box)
    target = pid_of.remote(7)
    ember.get(box.put.remote([target]))
    assert ember.get(waiter, timeout=60) == ember.get(target) + 1
    ember.get(shorts)


@pytest.mark.parametrize("round_", range(3))
def test_a_crash_ahead_fails_only_the_task_that_crashed(always_pipeline, round_):
    _warm()
    shorts = [pid_of.remote(i) for i in range(2)]
    crasher = crash.remote()
    behind = pid_of.remote(round_)  # max_retries=0: it must not be charged for the crash
    with pytest.raises(WorkerCrashedError):
        ember.get(crasher, timeout=60)
    assert isinstance(ember.get(behind, timeout=60), int)
    ember.get(shorts)


def test_cancelling_a_task_held_behind_another_fails_it_and_spares_the_other(
    always_pipeline,
):
    _warm()
    shorts = [pid_of.remote(i) for i in range(2)]
    slow = sleep_then_pid.remote(1.5)
    victim = sleep_then_pid.remote(20.0)
    ember.cancel(victim)
    started = time.monotonic()
    with pytest.raises(TaskCancelledError):
        ember.get(victim, timeout=30)
    assert time.monotonic() - started < 10
    assert isinstance(ember.get(slow, timeout=30), int)
    ember.get(shorts)


def test_pipelining_off_by_config(shared_node, monkeypatch):
    from ember import config

    monkeypatch.setattr(config, "max_tasks_in_flight_per_worker", 1)
    submitter = global_state.worker.task_submitter
    before = submitter.stats()["pipelined"]
    assert len(ember.get([pid_of.remote(i) for i in range(500)])) == 500
    assert submitter.stats()["pipelined"] == before
