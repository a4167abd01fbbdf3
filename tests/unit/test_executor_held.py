"""A worker's tasks pushed behind a running one (pipelined): whoever takes one first has it,
the main thread (runs it) or the I/O thread (gives it back unstarted on its hold's expiry, a
blocking get or a cancel). Driven without processes: the connection is a recorder."""

from __future__ import annotations

from ember.core_worker.executor import HOLD_QUEUED_S, Executor
from ember.core_worker.task_spec import TaskSpec


class _Reply:
    def __init__(self) -> None:
        self.values: list = []

    def resolve(self, value) -> None:
        self.values.append(value)


class _Loop:
    def __init__(self) -> None:
        self.timers: list[tuple[float, object, tuple]] = []

    def call_later(self, delay, fn, *args):
        self.timers.append((delay, fn, args))


class _Conn:
    def __init__(self) -> None:
        self.loop = _Loop()
        self.replies: list[_Reply] = []

    def deferred(self) -> _Reply:
        self.replies.append(_Reply())
        return self.replies[-1]


def _behind(n: int) -> TaskSpec:
    return TaskSpec(task_id=n.to_bytes(16, "big"), function_name="f", behind=True)


def _fire(conn: _Conn) -> None:
    for _delay, fn, args in conn.loop.timers:
        fn(*args)


def _run_recording(executor: Executor) -> list[bytes]:
    ran: list[bytes] = []
    executor._run_and_reply = lambda spec, reply_to: ran.append(spec.task_id)
    executor.queue.put(None)
    executor.run()
    return ran


def test_a_held_task_goes_back_when_its_hold_ends_and_is_not_run() -> None:
    executor, conn = Executor(host=None), _Conn()
    executor.on_push_task(conn, _behind(1))
    assert [t[0] for t in conn.loop.timers] == [HOLD_QUEUED_S]
    _fire(conn)
    assert conn.replies[0].values == [{"returned": True}]
    assert _run_recording(executor) == []


def test_the_main_thread_taking_it_first_runs_it_and_the_hold_does_nothing() -> None:
    executor, conn = Executor(host=None), _Conn()
    executor.on_push_task(conn, _behind(2))
    assert _run_recording(executor) == [(2).to_bytes(16, "big")]
    _fire(conn)
    assert conn.replies[0].values == []


def test_a_cancel_gives_a_held_task_back_even_with_force_and_kills_nothing() -> None:
    executor, conn = Executor(host=None), _Conn()
    executor.on_push_task(conn, _behind(3))
    executor.cancel((3).to_bytes(16, "big"), force=True)  # running, force would os._exit
    assert conn.replies[0].values == [{"returned": True}]
    assert _run_recording(executor) == []


def test_a_blocking_get_gives_back_every_held_task() -> None:
    executor, conn = Executor(host=None), _Conn()
    for n in (4, 5):
        executor.on_push_task(conn, _behind(n))
    executor.give_back_all()
    assert [r.values for r in conn.replies] == [[{"returned": True}]] * 2
    assert executor.held == {}
