"""Behaviour Ray's own test suite pins down (issue 17), each on its own: actor lifecycle
(``__ray_ready__``, ``__ray_terminate__``, ``exit_actor`` and ``sys.exit`` as intentional exits
that run ``atexit``), names and namespaces, ``get`` failing fast, nested errors keeping their
class, ``retry_exceptions`` with a class of the driver's ``__main__``, option checks,
``wait([])`` and the runtime context. The facts come from Ray 2.x's tests and docs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import ember
import pytest
from ember.exceptions import ActorDiedError, GetTimeoutError, TaskUnschedulableError
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from ember_test_utils import process_gone, wait_until

pytestmark = pytest.mark.timeout(120)


@ember.remote
class Box:
    def __init__(self, marker: str | None = None) -> None:
        self.items: list[int] = []
        if marker:
            import atexit

            atexit.register(lambda: open(marker, "w").write("atexit ran"))

    def add(self, x: int) -> int:
        time.sleep(0.05)
        self.items.append(x)
        return len(self.items)

    def pid(self) -> int:
        return os.getpid()

    def leave(self) -> None:
        ember.actor.exit_actor()

    def quit(self, code: int) -> None:
        sys.exit(code)

    def context(self) -> tuple:
        ctx = ember.get_runtime_context()
        me = ctx.current_actor
        return (
            me,
            None,
            ctx.get_assigned_resources(),
            ctx.get_task_name(),
            ctx.actor_id,
            ctx.get_actor_id(),
        )


def test_ray_ready_resolves_once_constructed(shared_node):
    slow = Box.options(num_cpus=0).remote()
    assert ember.get(slow.__ray_ready__.remote(), timeout=30) is True


def test_ray_terminate_ends_the_actor_after_the_calls_before_it(shared_node):
    box = Box.options(num_cpus=0).remote()
    pid = ember.get(box.pid.remote())
    before = [box.add.remote(i) for i in range(3)]
    box.__ray_terminate__.remote()
    assert ember.get(before, timeout=30) == [1, 2, 3]  # queued before it: all ran
    with pytest.raises(ActorDiedError) as died:
        ember.get(box.add.remote(9), timeout=30)
    assert "__ray_terminate__" in str(died.value) and "intentional" in str(died.value)
    wait_until(lambda: process_gone(pid), 15, message="the actor's process to end")


def test_exit_actor_runs_atexit_and_later_calls_say_it_was_intentional(shared_node, tmp_path):
    marker = tmp_path / "atexit"
    box = Box.options(num_cpus=0).remote(str(marker))
    ember.get(box.add.remote(1))
    with pytest.raises(ActorDiedError):
        ember.get(box.leave.remote(), timeout=30)
    # The handler's open() makes the file before its write: wait for the words.
    wait_until(
        lambda: marker.exists() and marker.read_text() == "atexit ran",
        15,
        message="the actor's atexit handler",
    )
    with pytest.raises(ActorDiedError) as later:
        ember.get(box.add.remote(2), timeout=30)
    assert "exit_actor()" in str(later.value) and "intentional" in str(later.value)


def test_sys_exit_0_in_a_method_is_an_intentional_exit(shared_node, tmp_path):
    marker = tmp_path / "atexit"
    box = Box.options(num_cpus=0).remote(str(marker))
    with pytest.raises(ActorDiedError) as died:
        ember.get(box.quit.remote(0), timeout=30)
    assert "sys.exit(0)" in str(died.value) and "intentional" in str(died.value)
    wait_until(marker.exists, 15, message="the actor's atexit handler")
    with pytest.raises(ActorDiedError):
        ember.get(box.add.remote(1), timeout=30)


def test_sys_exit_other_codes_in_a_method_are_a_crash(shared_node, tmp_path):
    # Ray 2.60: any code but 0 is an unexpected death (restarts and retries follow, as
    # tests/test_ray_actor_semantics_compare.py shows beside Ray); atexit handlers run.
    marker = tmp_path / "atexit"
    box = Box.options(num_cpus=0).remote(str(marker))
    with pytest.raises(ActorDiedError) as died:
        ember.get(box.quit.remote(3), timeout=30)
    assert "exited with code 3" in str(died.value) and "intentional" not in str(died.value)
    wait_until(marker.exists, 15, message="the actor's atexit handler")


def test_kill_is_immediate_and_runs_no_atexit(shared_node, tmp_path):
    marker = tmp_path / "atexit"
    box = Box.options(num_cpus=0).remote(str(marker))
    pid = ember.get(box.pid.remote())
    running = box.add.remote(1)
    ember.kill(box)
    with pytest.raises(ActorDiedError):
        ember.get([running, box.add.remote(2)], timeout=30)
    wait_until(lambda: process_gone(pid), 15, message="the killed actor's process to end")
    assert not marker.exists()


def test_subclassing_an_actor_class_is_refused_clearly():
    with pytest.raises(TypeError, match="Inheriting from actor classes is not"):

        class Derived(Box):  # type: ignore[misc, valid-type]
            pass


def test_empty_names_and_namespaces_are_refused(shared_node):
    with pytest.raises(ValueError, match="Actor name cannot be an empty string"):
        Box.options(name="").remote()
    with pytest.raises(ValueError, match="is not a valid namespace"):
        Box.options(name="named", namespace="").remote()


def test_concurrent_get_if_exists_return_one_actor(shared_node):
    got: list = []

    def make() -> None:
        try:
            got.append(Box.options(name="one-box", get_if_exists=True, num_cpus=0).remote())
        except Exception as e:  # noqa: BLE001 - the test asserts there are none
            got.append(e)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not [g for g in got if isinstance(g, Exception)], got
    assert len({g._actor_id for g in got}) == 1 and len(got) == 8
    ember.kill(got[0])


@ember.remote(max_retries=0)
def _boom() -> None:
    raise KeyError("boom at once")


@ember.remote
def _sleepy(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


def test_get_raises_a_failure_at_once_without_waiting_for_the_rest(shared_node):
    # No CPU for the sleepers: _boom must be able to run beside them.
    sleepers = [_sleepy.options(num_cpus=0).remote(20) for _ in range(2)]
    try:
        started = time.monotonic()
        with pytest.raises(KeyError):
            ember.get([sleepers[0], _boom.remote()], timeout=60)
        assert time.monotonic() - started < 10
        # A failure already known when get() starts raises too.
        failed = _boom.remote()
        with pytest.raises(KeyError):
            ember.get(failed)
        with pytest.raises(KeyError):
            ember.get([sleepers[1], failed], timeout=60)
        with pytest.raises(GetTimeoutError):
            ember.get([sleepers[0], _sleepy.remote(0)], timeout=0.5)
    finally:
        for ref in sleepers:  # their CPUs are the next tests'
            ember.cancel(ref, force=True)


@ember.remote(max_retries=0)
def _inner() -> None:
    raise ValueError("deep down")


@ember.remote(max_retries=0)
def _middle() -> None:
    ember.get(_inner.remote())


@ember.remote(max_retries=0)
def _outer() -> None:
    ember.get(_middle.remote())


def test_a_nested_error_keeps_its_class_at_every_level(shared_node):
    with pytest.raises(ValueError) as err:
        ember.get(_outer.remote())
    assert isinstance(err.value, ember.exceptions.RayTaskError)
    text = str(err.value)
    # Every level's traceback is in the text, the original message too.
    assert "deep down" in text and "_inner" in text and "_middle" in text and "_outer" in text
    assert repr(err.value).startswith(("RayTaskError(ValueError)", "TaskError(ValueError)"))
    # As Ray shows it: the user's frames only, under their file's real name, with their
    # source lines; none of Ember's (the executor, get).
    import re

    assert set(re.findall(r'File "([^"]+)"', text)) == {__file__}, text
    assert 'raise ValueError("deep down")' in text


def test_retry_exceptions_of_a_class_in_the_drivers_main(tmp_path):
    """The class lives in the driver's ``__main__``, which a worker cannot import."""
    program = tmp_path / "prog.py"
    program.write_text(
        textwrap.dedent(
            f"""
            import os
            import ember

            class UserError(Exception):
                pass

            @ember.remote(retry_exceptions=[UserError], max_retries=2)
            def flaky(path):
                n = int(open(path).read()) if os.path.exists(path) else 0
                open(path, "w").write(str(n + 1))
                if n < 2:
                    raise UserError(f"attempt {{n}}")
                return n

            ember.init(num_cpus=1, include_dashboard=False)
            print("result", ember.get(flaky.remote({str(tmp_path / "count")!r}), timeout=60))
            ember.shutdown()
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, timeout=90, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "result 2" in out.stdout


def test_wait_on_nothing_returns_two_empty_lists(shared_node):
    assert ember.wait([]) == ([], [])


def test_gpus_above_one_must_be_whole(shared_node):
    # As Ray: declaring it is fine, submitting it is the error (before anything runs).
    odd = _boom.options(num_gpus=1.5)
    with pytest.raises(ValueError, match="num_gpus.*1.5"):
        odd.remote()
    _boom.options(num_gpus=0.5)
    _boom.options(num_gpus=2)


def test_hard_affinity_to_a_missing_node_fails_at_once(shared_node):
    missing = NodeAffinitySchedulingStrategy("ab" * 16, soft=False)
    started = time.monotonic()
    with pytest.raises(TaskUnschedulableError, match="abab.*not alive"):
        ember.get(_sleepy.options(scheduling_strategy=missing).remote(0), timeout=30)
    assert time.monotonic() - started < 5


@ember.remote
def _task_context() -> tuple:
    ctx = ember.get_runtime_context()
    return (
        ctx.get_assigned_resources(),
        ctx.get_task_name(),
        ctx.task_id,
        ctx.get_task_id(),
        ctx.job_id,
        ctx.node_id,
        ctx.get(),
    )


def test_runtime_context_names_resources_and_ids(shared_node):
    resources, name, task_id, task_hex, job_id, node_id, summary = ember.get(_task_context.remote())
    assert resources == {"CPU": 1.0} and name == "_task_context"
    assert isinstance(task_id, ember.TaskID) and task_id.hex() == task_hex
    assert isinstance(job_id, ember.JobID)
    assert job_id.hex() == ember.get_runtime_context().get_job_id()
    assert node_id == ember.NodeID.from_hex(ember.get_runtime_context().get_node_id())
    assert set(summary) == {"job_id", "node_id", "namespace", "task_id"}
    box = Box.options(num_cpus=0).remote()
    me, _, actor_resources, actor_task, actor_id, actor_hex = ember.get(box.context.remote())
    assert me == box and ember.get(me.add.remote(5)) == 1  # a usable handle to itself
    assert actor_resources == {} and actor_task == "Box.context"
    assert isinstance(actor_id, ember.ActorID) and actor_id.hex() == actor_hex
    assert ember.get_runtime_context().get_task_name() is None  # the driver runs no task


@ember.remote(max_task_retries=2)
class Flaky:
    def __init__(self) -> None:
        self.calls = 0

    @ember.method(retry_exceptions=[KeyError])
    def listed(self) -> int:
        self.calls += 1
        if self.calls < 2:
            raise KeyError("once")
        return self.calls

    def unlisted(self) -> int:
        raise KeyError("not retried")


def test_method_retry_exceptions_retries_the_listed_classes(shared_node):
    actor = Flaky.options(num_cpus=0).remote()
    assert ember.get(actor.listed.remote(), timeout=30) == 2
    with pytest.raises(KeyError):
        ember.get(actor.unlisted.remote(), timeout=30)
    # The call's own option wins over the method's default.
    with pytest.raises(KeyError):
        ember.get(actor.unlisted.options(retry_exceptions=[ValueError]).remote(), timeout=30)


@ember.remote(concurrency_groups={"io": 1, "compute": 2})
class Grouped:
    @ember.method(concurrency_group="io")
    def hold(self, gate: str) -> str:
        deadline = time.monotonic() + 30
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.02)
        return "held"

    @ember.method(concurrency_group="compute")
    def compute(self) -> str:
        return "computed"

    def plain(self) -> str:
        return "plain"


def test_a_call_blocked_in_one_group_does_not_block_another(shared_node, tmp_path):
    gate = tmp_path / "gate"
    actor = Grouped.options(num_cpus=0).remote()
    held = actor.hold.remote(str(gate))
    # io has one thread, held: the other groups and the default group still answer.
    assert ember.get(actor.compute.remote(), timeout=10) == "computed"
    assert ember.get(actor.plain.remote(), timeout=10) == "plain"
    queued = actor.plain.options(concurrency_group="io").remote()  # behind the held one
    ready, _ = ember.wait([queued], timeout=0.5)
    assert not ready
    gate.touch()
    assert ember.get([held, queued], timeout=30) == ["held", "plain"]
    with pytest.raises(ValueError, match="concurrency group 'nope'"):
        ember.get(actor.plain.options(concurrency_group="nope").remote(), timeout=30)


def test_undeclared_concurrency_groups_are_refused():
    with pytest.raises(ValueError, match="concurrency group 'io'.*does not declare"):

        @ember.remote
        class Undeclared:
            @ember.method(concurrency_group="io")
            def f(self) -> None:
                pass


@ember.remote(concurrency_groups={"slow": 1})
class AsyncGrouped:
    @ember.method(concurrency_group="slow")
    async def slow(self) -> str:
        import asyncio

        await asyncio.sleep(1.0)
        return "slow"

    async def fast(self) -> str:
        return "fast"

    async def interruptible(self, marker: str) -> str:
        import asyncio

        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            open(marker, "w").write("cancelled inside")
            raise
        return "not cancelled"


def test_async_groups_have_their_own_limits(shared_node):
    actor = AsyncGrouped.options(num_cpus=0).remote()
    started = time.monotonic()
    slow = [actor.slow.remote() for _ in range(2)]  # a limit of 1: one after the other
    assert ember.get(actor.fast.remote(), timeout=10) == "fast"
    assert time.monotonic() - started < 0.9  # not behind the slow group
    assert ember.get(slow, timeout=30) == ["slow", "slow"]
    assert time.monotonic() - started >= 1.9


def test_cancelling_an_async_actor_call_raises_cancelled_error_inside_it(shared_node, tmp_path):
    marker = tmp_path / "marker"
    actor = AsyncGrouped.options(num_cpus=0).remote()
    ember.get(actor.fast.remote())
    call = actor.interruptible.remote(str(marker))
    time.sleep(0.3)  # let it start: the test is about a running call
    ember.cancel(call)
    with pytest.raises(ember.exceptions.TaskCancelledError):
        ember.get(call, timeout=30)
    wait_until(marker.exists, 10, message="CancelledError inside the call")
    assert ember.get(actor.fast.remote(), timeout=10) == "fast"  # the actor lives on
    with pytest.raises(ValueError, match="force=True is not supported for actor tasks"):
        ember.cancel(actor.interruptible.remote(str(marker)), force=True)


@ember.remote(max_retries=0)
def _child(marker: str) -> str:
    open(marker, "w").write("child running")
    try:
        time.sleep(60)
    except BaseException as e:  # what a cancelled task sees inside: Ray's KeyboardInterrupt
        open(marker + ".saw", "w").write(type(e).__name__)
        raise
    return "child done"


@ember.remote(max_retries=0)
def _parent(marker: str) -> str:
    return ember.get(_child.remote(marker))


def test_cancel_is_recursive_by_default(shared_node, tmp_path):
    marker = tmp_path / "child"
    parent = _parent.remote(str(marker))
    wait_until(marker.exists, 30, message="the child to start")
    from ember.util import state

    def child_state() -> str | None:
        rows = state.list_tasks(filters=[("name", "=", "_child")], limit=100)
        return rows[-1].state if rows else None

    ember.cancel(parent)
    with pytest.raises(ember.exceptions.TaskCancelledError):
        ember.get(parent, timeout=30)
    # The child was cancelled too: its CPU is free again, its row FAILED.
    wait_until(lambda: child_state() == "FAILED", 30, message="the child to be cancelled")
    # Inside, the cancelled child saw KeyboardInterrupt, as a Ray task does.
    saw = tmp_path / "child.saw"
    wait_until(saw.exists, 10, message="the child's except clause")
    assert saw.read_text() == "KeyboardInterrupt"


@ember.remote
def _where_am_i() -> tuple:
    from ember.util import get_current_placement_group

    pg = get_current_placement_group()
    return (pg.id.hex() if pg else None), os.environ.get("CUDA_VISIBLE_DEVICES")


def test_placement_groups_wait_then_place_and_say_where_tasks_run(tmp_path):
    from ember.util import placement_group, placement_group_table, remove_placement_group
    from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if ember.is_initialized():
        ember.shutdown()
    ember.init(num_cpus=2, num_gpus=2, include_dashboard=False)
    try:
        first = placement_group([{"CPU": 2}], name="takes-all")
        assert ember.get(first.ready(), timeout=30)
        second = placement_group([{"CPU": 1, "GPU": 1}])
        with pytest.raises(GetTimeoutError):  # no room now: PENDING, not an error
            ember.get(second.ready(), timeout=1)
        assert placement_group_table(second)["state"] == "PENDING"
        remove_placement_group(first)
        assert ember.get(second.ready(), timeout=30)  # placed once resources are free
        table = placement_group_table(second)
        assert set(table) == {  # Ray 2.x's keys, no more
            "placement_group_id",
            "name",
            "bundles",
            "bundles_to_node_id",
            "strategy",
            "state",
            "stats",
        }
        assert table["state"] == "CREATED" and table["bundles"] == {0: {"CPU": 1.0, "GPU": 1.0}}
        assert table["bundles_to_node_id"] == {0: ember.get_runtime_context().get_node_id()}
        assert second.id.hex() in placement_group_table()
        in_group = _where_am_i.options(
            num_gpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(second)
        )
        pg_id, gpus = ember.get(in_group.remote())
        assert pg_id == second.id.hex() and gpus is not None and len(gpus.split(",")) == 1
        # The driver is in no group; a plain task neither, and it does not keep the last
        # task's GPUs on the reused worker.
        from ember.util import get_current_placement_group

        assert get_current_placement_group() is None
        for _ in range(4):
            assert ember.get(_where_am_i.remote()) == (None, os.environ.get("CUDA_VISIBLE_DEVICES"))
        remove_placement_group(second)
    finally:
        ember.shutdown()


def test_a_second_driver_joins_with_the_address_init_reported(shared_node, tmp_path):
    """``init()``'s node takes a second driver of this machine, by the address it reported
    (Ray's ``ray.init(address=...)`` on the first driver's local cluster), and the two see
    each other's named actors."""
    address = ember.get_runtime_context().gcs_address
    keeper = Box.options(name="shared-box", namespace="joint", num_cpus=0).remote()
    ember.get(keeper.add.remote(7))
    program = tmp_path / "second.py"
    program.write_text(
        textwrap.dedent(
            f"""
            import ember
            ember.init(address={address!r}, namespace="joint")

            @ember.remote
            def f():
                return 42

            box = ember.get_actor("shared-box")
            print("second", ember.get(f.remote()), ember.get(box.add.remote(8)))
            ember.shutdown()
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, timeout=90, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "second 42 2" in out.stdout
    ember.kill(keeper)


def test_every_timeline_event_carries_a_category(shared_node):
    ember.get([_sleepy.remote(0) for _ in range(3)])
    events = ember.timeline()
    assert events and all("cat" in e for e in events), [e for e in events if "cat" not in e][:3]
    assert {e["cat"] for e in events if e["ph"] == "M"} == {"__metadata"}


def test_placement_group_is_callable_however_it_was_imported():
    """``ember.util.placement_group`` is the function and the module of that name, as in
    Ray; importing the module first must not make ``ember.util.placement_group(...)`` fail."""
    import ember.util
    from ember.util.placement_group import PlacementGroup  # noqa: F401 - binds the module

    assert callable(ember.util.placement_group)
    with pytest.raises(ValueError, match="non-empty list"):
        ember.util.placement_group([])


def test_task_and_method_names_are_ray_short_names(shared_node):
    """Ray names a task by the function's own name and a call ``Class.method``, however deep
    the function or class is nested (get_task_name, the state API, the timeline)."""

    @ember.remote
    def nested_task() -> str | None:
        return ember.get_runtime_context().get_task_name()

    @ember.remote
    class NestedActor:
        def name(self) -> str | None:
            return ember.get_runtime_context().get_task_name()

    assert ember.get(nested_task.remote(), timeout=30) == "nested_task"
    actor = NestedActor.options(num_cpus=0).remote()
    assert ember.get(actor.name.remote(), timeout=30) == "NestedActor.name"
    ember.kill(actor)


@ember.remote(max_restarts=1, max_task_retries=1)
class _Phoenix:
    def crash_once(self, marker: str) -> str:
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return "after restart"

    def reconstructed(self) -> bool:
        return ember.get_runtime_context().was_current_actor_reconstructed


def test_was_current_actor_reconstructed_after_a_restart(shared_node, tmp_path):
    actor = _Phoenix.options(num_cpus=0).remote()
    assert ember.get(actor.reconstructed.remote(), timeout=30) is False
    # The call that killed it is retried on the restarted actor, which knows it restarted.
    assert ember.get(actor.crash_once.remote(str(tmp_path / "m")), timeout=30) == "after restart"
    assert ember.get(actor.reconstructed.remote(), timeout=30) is True
    ember.kill(actor)


def test_placement_group_ids_are_id_objects_and_the_module_pickles(shared_node):
    """``pg.id`` is a PlacementGroupID (``.hex()`` is the table's key), and a task that
    captured the ``placement_group`` module (callable, so a ModuleType subclass) ships."""
    import importlib

    # The module (``import ... as`` would give the function of its name, in Ray too).
    pgs = importlib.import_module("ember.util.placement_group")
    pg = pgs.placement_group([{"CPU": 0.01}])
    try:
        assert ember.get(pg.ready(), timeout=30) == pg
        assert isinstance(pg.id, ember.PlacementGroupID)
        assert pgs.placement_group_table(pg)["placement_group_id"] == pg.id.hex()

        @ember.remote
        def group_of_caller() -> str | None:
            current = pgs.get_current_placement_group()
            return current.id.hex() if current else None

        from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        placed = group_of_caller.options(
            num_cpus=0.01, scheduling_strategy=PlacementGroupSchedulingStrategy(pg)
        )
        assert ember.get(placed.remote(), timeout=30) == pg.id.hex()
    finally:
        pgs.remove_placement_group(pg)
