"""One program of the semantics Ray's own tests pin down (issue 17), run on Ray and on Ember:

    tests/tools/.ray-venv/bin/python tests/tools/ray_semantics_programs.py ray
    .venv/bin/python tests/tools/ray_semantics_programs.py ember

prints one JSON object: ``same``, the outcomes both must agree on, and ``own``, the cases
where Ember means to differ (``tests/test_ray_semantics_compare.py`` says which and why).
The runtime is imported by the name given, as a migrated program does with
``import ember as ray``; the program uses nothing else but the standard library. One
``init`` per run; every wait has a deadline, so a runtime that hangs fails a case, not the run.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# The error types a caller catches, by the names of either runtime (Ember also answers to
# Ray's names, but its classes have their own).
RUNTIME_ERRORS = {
    "RayTaskError": ("RayTaskError", "TaskError"),
    "RayActorError": ("RayActorError", "ActorError"),
    "ActorDiedError": ("ActorDiedError",),
    "ActorUnavailableError": ("ActorUnavailableError",),
    "TaskCancelledError": ("TaskCancelledError",),
    "GetTimeoutError": ("GetTimeoutError",),
    "TaskUnschedulableError": ("TaskUnschedulableError",),
    "WorkerCrashedError": ("WorkerCrashedError",),
    "RuntimeEnvSetupError": ("RuntimeEnvSetupError",),
    "ActorAlreadyExistsError": ("ActorAlreadyExistsError",),
}
STDLIB_ERRORS = (ValueError, KeyError, TypeError, RuntimeError, TimeoutError, SystemExit)
T = 60  # the longest a get waits: seconds suffice, but a loaded machine starts Ray workers slowly


class UserError(Exception):
    """Lives in the driver's ``__main__``, which a worker cannot import."""


def kinds(e: BaseException) -> list[str]:
    """What ``except`` would catch ``e`` as: stdlib classes, then the runtime's."""
    out = [k.__name__ for k in STDLIB_ERRORS if isinstance(e, k)]
    names = {c.__name__ for c in type(e).__mro__}
    out += [k for k, aliases in RUNTIME_ERRORS.items() if names & set(aliases)]
    return out or [type(e).__name__]


def outcome(fn: Any, *fragments: str) -> list:
    """``["ok", fn()]``, or ``["raised", kinds, {fragment: in the message}]``; a fragment
    ``a|b`` is in the message when either is."""
    try:
        return ["ok", fn()]
    except BaseException as e:  # noqa: BLE001 - the outcome is what is compared
        text = str(e).lower()
        found = {f: any(a.lower() in text for a in f.split("|")) for f in fragments}
        return ["raised", kinds(e), found]


def within(seconds: float, fn: Any) -> list:
    """``[the outcome of fn, whether it came within seconds]``."""
    started = time.monotonic()
    got = outcome(fn)
    return [got, time.monotonic() - started < seconds]


def poll(predicate: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def read(path: str) -> str | None:
    return open(path).read() if os.path.exists(path) else None


# What an ActorDiedError's message says about the death (Ray: "INTENDED_USER_EXIT ...
# exit_actor() is called", "killed by `ray.kill`"; Ember: "... (an intentional exit)").
DIED = ("intended|intentional", "exit_actor", "kill")

# Ember's own answers found while running the shared cases (see own_cases).
OWN: dict[str, Any] = {}


def lost_call(fn: Any) -> list:
    """The outcome of the call an actor died under, as compared: that it raised an actor
    error and what the message says. Which subclass varies from run to run in Ray 2.60
    (ActorDiedError, or ActorUnavailableError when the reply races the death notice)."""
    got = outcome(fn, *DIED)
    if got[0] == "raised" and "RayActorError" in got[1]:
        got[1] = ["RayActorError"]
    return got


def cancelled(ref_outcome: list) -> list:
    """A cancel's outcome as compared: whether ``except TaskCancelledError`` catches it; the
    other classes it is an instance of go to OWN."""
    return ref_outcome[:1] + [ref_outcome[0] == "raised" and "TaskCancelledError" in ref_outcome[1]]


def actor_classes(ray: Any) -> dict[str, Any]:
    @ray.remote
    class Box:
        def __init__(self, marker: str | None = None) -> None:
            self.items: list[int] = []
            if marker:
                atexit.register(write, marker, "atexit ran")

        def add(self, x: int) -> int:
            time.sleep(0.05)
            self.items.append(x)
            return len(self.items)

        def leave(self) -> None:
            ray.actor.exit_actor()

        def quit(self, code: int | None) -> None:
            sys.exit(code)

        def me(self) -> str:
            return ray.get_runtime_context().get_actor_id()

        def context(self) -> dict:
            ctx = ray.get_runtime_context()
            actor_id = ctx.get_actor_id()
            return {
                "current_actor": ctx.current_actor,  # the caller asks it who it is
                "resources": ctx.get_assigned_resources(),
                "task_name": ctx.get_task_name(),
                "actor_id": actor_id,
                "reconstructed": ctx.was_current_actor_reconstructed,
            }

    return {"Box": Box}


def lifecycle_cases(ray: Any, tmp: str) -> dict:
    Box = actor_classes(ray)["Box"]
    out: dict[str, Any] = {}
    # Every actor at once: their worker processes start side by side (Ray's take seconds).
    marks = {k: os.path.join(tmp, k) for k in ("exit_actor", "sys_exit", "kill")}
    boxes = {"terminate": Box.remote(), **{k: Box.remote(m) for k, m in marks.items()}}

    box = boxes["terminate"]
    out["ray_ready"] = outcome(lambda: ray.get(box.__ray_ready__.remote(), timeout=T))
    before = [box.add.remote(i) for i in range(3)]
    box.__ray_terminate__.remote()
    out["terminate_queued_before"] = outcome(lambda: ray.get(before, timeout=T))
    # (Ray's message says exit_actor(), which its __ray_terminate__ calls; Ember's names
    # __ray_terminate__: only that it was intended is compared.)
    out["terminate_later"] = outcome(lambda: ray.get(box.add.remote(9), timeout=T), DIED[0])

    marker, box = marks["exit_actor"], boxes["exit_actor"]
    ray.get(box.add.remote(1), timeout=T)
    out["exit_actor_call"] = lost_call(lambda: ray.get(box.leave.remote(), timeout=T))
    out["exit_actor_atexit"] = poll(lambda: read(marker) == "atexit ran")
    out["exit_actor_later"] = outcome(lambda: ray.get(box.add.remote(2), timeout=T), *DIED)

    marker, box = marks["sys_exit"], boxes["sys_exit"]
    out["sys_exit_call"] = lost_call(lambda: ray.get(box.quit.remote(0), timeout=T))
    out["sys_exit_atexit"] = poll(lambda: read(marker) == "atexit ran")
    out["sys_exit_later"] = outcome(lambda: ray.get(box.add.remote(2), timeout=T), *DIED)

    marker, box = marks["kill"], boxes["kill"]
    ray.get(box.add.remote(1), timeout=T)
    running = box.add.remote(2)
    ray.kill(box)
    out["kill_in_flight"] = lost_call(lambda: ray.get(running, timeout=T))
    out["kill_later"] = outcome(lambda: ray.get(box.add.remote(3), timeout=T), *DIED)
    time.sleep(0.5)  # an atexit handler would have run by now
    out["kill_atexit"] = read(marker)

    def subclass() -> None:
        class Derived(Box):  # type: ignore[misc, valid-type]
            pass

    out["subclass"] = outcome(subclass, "Inheriting from actor classes is not")
    return out


def fault_tolerance_cases(ray: Any, tmp: str) -> dict:
    @ray.remote(max_restarts=1)
    class Phoenix:
        def crash_once(self, marker: str) -> str:
            if not os.path.exists(marker):
                write(marker, "crashed")
                os._exit(1)
            return "after restart"

        def reconstructed(self) -> bool:
            return ray.get_runtime_context().was_current_actor_reconstructed

    @ray.remote(max_task_retries=2)
    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        @ray.method(retry_exceptions=[KeyError])
        def listed(self) -> int:
            self.calls += 1
            if self.calls % 2:
                raise KeyError("once")
            return self.calls

        @ray.method(retry_exceptions=True)
        def any_error(self) -> int:
            self.calls += 1
            if self.calls % 2:
                raise RuntimeError("once")
            return self.calls

        def unlisted(self) -> int:
            raise KeyError("not retried")

    out: dict[str, Any] = {}
    phoenixes = {n: Phoenix.options(max_task_retries=n).remote() for n in (1, -1, 0)}
    flaky = Flaky.remote()
    for retries, actor in phoenixes.items():
        first = outcome(lambda a=actor: ray.get(a.reconstructed.remote(), timeout=T))
        marker = os.path.join(tmp, f"phoenix{retries}")
        call = actor.crash_once.remote(marker)
        queued = actor.reconstructed.remote()
        out[f"max_task_retries={retries}"] = [
            first,
            outcome(lambda c=call: ray.get(c, timeout=T)),
            outcome(lambda q=queued: ray.get(q, timeout=T)),
        ]
        ray.kill(actor)

    out["method_retry_listed"] = outcome(lambda: ray.get(flaky.listed.remote(), timeout=T))
    out["method_retry_true"] = outcome(lambda: ray.get(flaky.any_error.remote(), timeout=T))
    out["method_retry_unlisted"] = outcome(lambda: ray.get(flaky.unlisted.remote(), timeout=T))
    over = flaky.unlisted.options(retry_exceptions=[ValueError])
    out["method_retry_call_option"] = outcome(lambda: ray.get(over.remote(), timeout=T))
    ray.kill(flaky)
    return out


def error_cases(ray: Any, tmp: str) -> dict:
    @ray.remote(max_retries=0)
    def boom() -> None:
        raise KeyError("boom at once")

    @ray.remote
    def sleepy(seconds: float) -> str:
        time.sleep(seconds)
        return "slept"

    @ray.remote(max_retries=0)
    def inner() -> None:
        raise ValueError("deep down")

    @ray.remote(max_retries=0)
    def middle() -> None:
        ray.get(inner.remote())

    @ray.remote(max_retries=0)
    def outer() -> None:
        ray.get(middle.remote())

    @ray.remote(retry_exceptions=[UserError], max_retries=2)
    def flaky(path: str) -> int:
        n = int(read(path) or 0)
        write(path, str(n + 1))
        if n < 2:
            raise UserError(f"attempt {n}")
        return n

    out: dict[str, Any] = {}
    pending = sleepy.remote(120)  # far beyond the bound below: a get that waits for it fails
    out["get_fails_fast"] = within(30, lambda: ray.get([pending, boom.remote()], timeout=T))
    failed = boom.remote()
    out["get_failed_first"] = within(30, lambda: ray.get([failed, pending], timeout=T))
    out["get_timeout"] = outcome(lambda: ray.get([pending], timeout=0.3))
    out["get_timeout_zero"] = outcome(lambda: ray.get(pending, timeout=0))
    out["wait_more_than_given"] = outcome(lambda: ray.wait([pending], num_returns=2), "num_returns")
    out["wait_timeout"] = outcome(lambda: [len(x) for x in ray.wait([pending], timeout=0.2)])
    # wait's checks, and what comes back in which list. Which of several ready refs fill
    # num_returns is not promised (Ray 2.60 picks in its hash order; Ember in list order),
    # only that each list keeps the order the refs were given in.
    a, b, c = ray.put(1), ray.put(2), ray.put(3)

    def shape(given: list, **kw: Any) -> list:
        ready, rest = ray.wait(given, **kw)
        in_order = all(
            [given.index(r) for r in part] == sorted(given.index(r) for r in part)
            for part in (ready, rest)
        )
        return [len(ready), len(rest), pending in ready, in_order]

    out["wait_order"] = outcome(lambda: shape([pending, a, b, c], num_returns=2))
    out["wait_all_ready"] = outcome(lambda: shape([c, b, a], num_returns=3))
    out["wait_first_ready"] = outcome(lambda: shape([c, pending, a]))
    out["wait_duplicates"] = outcome(lambda: ray.wait([a, b, a]), "unique")
    out["wait_not_a_ref"] = outcome(lambda: ray.wait([a, 1]), "ObjectRef")
    out["wait_one_ref"] = outcome(lambda: ray.wait(a), "list")
    ray.cancel(pending, force=True)

    try:
        ray.get(outer.remote(), timeout=T)
        out["nested"] = "no error"
    except Exception as e:  # noqa: BLE001 - what it is, is compared
        text = str(e)
        out["nested"] = {
            "kinds": kinds(e),
            "type_name": type(e)
            .__name__.replace("TaskError", "RayTaskError")
            .replace("RayRay", "Ray"),
            "cause": type(getattr(e, "cause", None)).__name__,
            "in_str": {f: f in text for f in ("deep down", "inner", "middle", "outer")},
            # The remote traceback: Ray prints its frames without Python's header line.
            "str_has_frames": 'File "' in text and ", in inner" in text,
            # Only the user's frames, with their file's real name: none of the runtime's.
            "frames_all_in_program": sorted(set(re.findall(r'File "([^"]+)"', text)))
            == [os.path.abspath(__file__)],
            "source_lines_shown": 'raise ValueError("deep down")' in text,
            "str_mentions_ValueError": "ValueError" in text,
        }
    out["retry_main_class"] = outcome(lambda: ray.get(flaky.remote(f"{tmp}/flaky"), timeout=T))
    return out


def name_cases(ray: Any, tmp: str) -> dict:
    Box = actor_classes(ray)["Box"]
    out: dict[str, Any] = {}
    # A second driver joins with the address init() reported and uses this one's named actor;
    # it starts first and runs while the other cases do (a Ray driver takes seconds).
    keeper = Box.options(name="shared-box", namespace="joint").remote()
    ray.get(keeper.add.remote(7), timeout=T)
    second = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import {sys.argv[1]} as ray\n"
            f"ray.init(address={ray.get_runtime_context().gcs_address!r}, namespace='joint')\n"
            "box = ray.get_actor('shared-box')\n"
            "print('second', ray.get(box.add.remote(8), timeout=30))\n"
            "ray.shutdown()\n",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )

    out["empty_name"] = outcome(lambda: Box.options(name="").remote(), "empty")
    out["unknown_name"] = outcome(lambda: ray.get_actor("no-such-actor"), "no-such-actor")
    out["empty_namespace"] = outcome(
        lambda: Box.options(name="x", namespace="").remote(), "namespace"
    )
    got: list = []
    handles: list = []  # an actor without handles ends: keep them for get_actor below

    def make() -> None:
        try:
            box = Box.options(name="one-box", get_if_exists=True).remote()
            handles.append(box)
            got.append(ray.get(box.me.remote(), timeout=T))
        except Exception as e:  # noqa: BLE001 - counted below
            got.append(kinds(e))

    threads = [threading.Thread(target=make) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(T)
    out["get_if_exists_concurrent"] = [len(got), len({str(g) for g in got})]
    ray.kill(ray.get_actor("one-box"))

    try:
        printed, _ = second.communicate(timeout=60)
        out["second_driver"] = [second.returncode, (printed.strip().splitlines() or [""])[-1]]
    except subprocess.TimeoutExpired:
        second.kill()
        second.communicate()
        out["second_driver"] = "timed out"
    ray.kill(keeper)
    return out


def concurrency_cases(ray: Any, tmp: str) -> dict:
    @ray.remote(concurrency_groups={"io": 1, "compute": 2})
    class Grouped:
        @ray.method(concurrency_group="io")
        def hold(self, gate: str) -> str:
            return "held" if poll(lambda: os.path.exists(gate), T) else "gate never opened"

        @ray.method(concurrency_group="compute")
        def compute(self) -> str:
            return "computed"

        def plain(self) -> str:
            return "plain"

    @ray.remote(max_concurrency=2)
    class Wide:
        def __init__(self) -> None:
            self.lock, self.running, self.peak = threading.Lock(), 0, 0

        def work(self) -> int:
            with self.lock:
                self.running += 1
                self.peak = max(self.peak, self.running)
            time.sleep(0.6)  # long enough for the next call to start beside it, under load
            with self.lock:
                self.running -= 1
            return self.peak

    @ray.remote(concurrency_groups={"slow": 1})
    class AsyncGrouped:
        @ray.method(concurrency_group="slow")
        async def slow(self) -> float:
            await asyncio.sleep(1.0)  # room for the fast call to come in between, under load
            return time.monotonic()

        async def fast(self) -> float:
            return time.monotonic()

    out: dict[str, Any] = {}
    gate = os.path.join(tmp, "gate")
    actor, wide, grouped = Grouped.remote(), Wide.remote(), AsyncGrouped.remote()
    held = actor.hold.remote(gate)
    out["other_group_answers"] = outcome(lambda: ray.get(actor.compute.remote(), timeout=10))
    out["default_group_answers"] = outcome(lambda: ray.get(actor.plain.remote(), timeout=10))
    queued = actor.plain.options(concurrency_group="io").remote()
    out["same_group_waits"] = len(ray.wait([queued], timeout=0.5)[0])
    write(gate, "open")
    out["group_after_gate"] = outcome(lambda: ray.get([held, queued], timeout=T))
    ray.kill(actor)

    out["max_concurrency_peak"] = outcome(
        lambda: max(ray.get([wide.work.remote() for _ in range(4)], timeout=T))
    )
    ray.kill(wide)

    ray.get(grouped.fast.remote(), timeout=T)
    slow = [grouped.slow.remote() for _ in range(2)]
    fast = ray.get(grouped.fast.remote(), timeout=T)
    ends = ray.get(slow, timeout=T)
    out["async_group"] = {
        "fast_before_slow": fast < min(ends),
        "slow_one_at_a_time": abs(ends[1] - ends[0]) >= 0.95,
    }
    ray.kill(grouped)
    return out


def cancel_cases(ray: Any, tmp: str) -> dict:
    @ray.remote
    class Waiter:
        async def ping(self) -> str:
            return "pong"

        async def interruptible(self, marker: str) -> str:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                write(marker, "CancelledError")
                raise
            return "not cancelled"

    @ray.remote(max_retries=0)
    def child(started: str, seen: str) -> str:
        write(started, "running")
        try:
            for _ in range(600):  # short sleeps: Ray's interrupt lands between two
                time.sleep(0.1)
        except BaseException as e:
            write(seen, type(e).__name__)
            raise
        return "child done"

    @ray.remote(max_retries=0)
    def parent(started: str, seen: str) -> str:
        return ray.get(child.remote(started, seen))

    out: dict[str, Any] = {}
    waiter = Waiter.remote()
    ray.get(waiter.ping.remote(), timeout=T)
    marker = os.path.join(tmp, "cancelled")
    call = waiter.interruptible.remote(marker)
    time.sleep(0.3)  # running, not queued: the case is a running call
    ray.cancel(call)
    OWN["cancel_async_call"] = outcome(lambda: ray.get(call, timeout=T))
    out["async_call"] = cancelled(OWN["cancel_async_call"])
    out["async_inside"] = read(marker) if poll(lambda: read(marker), 10) else None
    out["async_actor_lives"] = outcome(lambda: ray.get(waiter.ping.remote(), timeout=T))
    out["force_on_actor_call"] = outcome(
        lambda: ray.cancel(waiter.interruptible.remote(marker), force=True), "force"
    )
    ray.kill(waiter)

    started, seen = os.path.join(tmp, "child_started"), os.path.join(tmp, "child_saw")
    top = parent.remote(started, seen)
    out["child_started"] = poll(lambda: os.path.exists(started), T)
    ray.cancel(top)
    OWN["cancel_recursive_parent"] = outcome(lambda: ray.get(top, timeout=T))
    out["recursive_parent"] = cancelled(OWN["cancel_recursive_parent"])
    # 30 s: on two busy cores (the suite's neighbour) Ray's child once saw nothing in 15.
    out["recursive_child_saw"] = read(seen) if poll(lambda: read(seen), 30) else None
    return out


def placement_cases(ray: Any, tmp: str) -> dict:
    from importlib import import_module

    pgs = import_module(f"{sys.argv[1]}.util.placement_group")
    strategies = import_module(f"{sys.argv[1]}.util.scheduling_strategies")

    @ray.remote
    def where() -> list:
        pg = pgs.get_current_placement_group()
        gpus = [str(g) for g in ray.get_gpu_ids()]
        return [pg.id.hex() if pg else None, os.environ.get("CUDA_VISIBLE_DEVICES"), gpus]

    out: dict[str, Any] = {}
    first = pgs.placement_group([{"GPU": 2}], name="takes-all")
    out["first_ready"] = outcome(lambda: type(ray.get(first.ready(), timeout=T)).__name__)
    second = pgs.placement_group([{"CPU": 1, "GPU": 1}])
    out["second_waits"] = outcome(lambda: ray.get(second.ready(), timeout=1))
    out["second_state_before"] = pgs.placement_group_table(second)["state"]
    out["second_wait_before"] = outcome(lambda: second.wait(timeout_seconds=0.5))
    pgs.remove_placement_group(first)
    out["second_ready_after"] = outcome(lambda: ray.get(second.ready(), timeout=T) == second)
    table = pgs.placement_group_table(second)
    node = ray.get_runtime_context().get_node_id()
    out["table"] = {
        "keys": sorted(table),
        "state": table["state"],
        "strategy": table["strategy"],
        "bundles": {str(k): v for k, v in table["bundles"].items()},
        "bundles_to_node_id": {str(k): v == node for k, v in table["bundles_to_node_id"].items()},
        "id_is_hex": table["placement_group_id"] == second.id.hex(),
        "all_keyed_by_hex": second.id.hex() in pgs.placement_group_table(),
        "id_type": type(second.id).__name__,
    }
    in_group = where.options(
        num_gpus=1,
        scheduling_strategy=strategies.PlacementGroupSchedulingStrategy(second),
    )
    pg_id, visible, gpu_ids = ray.get(in_group.remote(), timeout=T)
    # One of the bundle's GPUs, the same one in CUDA_VISIBLE_DEVICES and get_gpu_ids().
    out["in_bundle"] = [pg_id == second.id.hex(), (visible or "").split(",") == gpu_ids]
    out["in_bundle_gpus"] = len(gpu_ids)
    out["driver_group"] = pgs.get_current_placement_group()
    plain = {tuple(ray.get(where.remote(), timeout=T)[:2]) for _ in range(4)}
    out["plain_tasks"] = sorted([pg, env is None or env == ""] for pg, env in plain)
    pgs.remove_placement_group(second)
    out["empty_bundles"] = outcome(lambda: pgs.placement_group([]), "bundle")

    @ray.remote
    def nothing() -> None:
        return None

    # Both check at .remote() (issue 33), before anything runs.
    out["gpus_above_one"] = outcome(lambda: nothing.options(num_gpus=1.5).remote(), "1.5", "whole")
    out["gpus_fraction_is_fine"] = outcome(lambda: bool(nothing.options(num_gpus=0.5)))
    missing = strategies.NodeAffinitySchedulingStrategy("ab" * (len(node) // 2), soft=False)
    out["affinity_missing_node"] = within(
        15, lambda: ray.get(nothing.options(scheduling_strategy=missing).remote(), timeout=T)
    )
    return out


def runtime_env_cases(ray: Any, tmp: str) -> dict:
    keys = ("SEM_JOB", "SEM_TASK", "SEM_BOTH", "SEM_ACTOR")

    @ray.remote
    def env() -> dict:
        return {k: os.environ.get(k) for k in keys}

    @ray.remote
    def from_working_dir() -> list:
        import sem_wd_helper

        return [sem_wd_helper.MARK, read("data.txt"), os.path.exists("skip.bin")]

    @ray.remote
    def from_py_modules() -> str:
        import sem_lib

        return sem_lib.hello()

    @ray.remote
    class EnvActor:
        def read(self) -> dict:
            return {k: os.environ.get(k) for k in keys}

        def spawn(self) -> dict:
            return ray.get(env.remote(), timeout=T)

    out: dict[str, Any] = {}
    out["init_env_vars"] = ray.get(env.remote(), timeout=T)
    task_env = {"env_vars": {"SEM_TASK": "t", "SEM_BOTH": "task"}}
    out["task_env_vars"] = ray.get(env.options(runtime_env=task_env).remote(), timeout=T)
    out["then_plain"] = [ray.get(env.remote(), timeout=T) for _ in range(3)]
    actor = EnvActor.options(runtime_env={"env_vars": {"SEM_ACTOR": "a"}}).remote()
    out["actor_env_vars"] = ray.get(actor.read.remote(), timeout=T)
    out["actor_child_env_vars"] = ray.get(actor.spawn.remote(), timeout=T)
    ray.kill(actor)
    out["working_dir"] = outcome(lambda: ray.get(from_working_dir.remote(), timeout=T))
    out["py_modules"] = outcome(lambda: ray.get(from_py_modules.remote(), timeout=T))
    return out


def context_cases(ray: Any, tmp: str) -> dict:
    Box = actor_classes(ray)["Box"]

    @ray.remote
    def task_context() -> dict:
        ctx = ray.get_runtime_context()
        ids = {"task_id": ctx.task_id, "job_id": ctx.job_id, "node_id": ctx.node_id}
        return {
            "resources": ctx.get_assigned_resources(),
            "task_name": ctx.get_task_name(),
            "id_types": {k: type(v).__name__ for k, v in ids.items()},
            "hex_agrees": [
                ctx.task_id.hex() == ctx.get_task_id(),
                ctx.job_id.hex() == ctx.get_job_id(),
                ctx.node_id.hex() == ctx.get_node_id(),
            ],
            "actor_id": ctx.get_actor_id(),
            "summary_keys": sorted(ctx.get()),
        }

    ctx = ray.get_runtime_context()
    box = Box.remote()
    in_actor = ray.get(box.context.remote(), timeout=T)
    me = in_actor.pop("current_actor")
    in_actor["current_actor_is_it"] = ray.get(me.me.remote(), timeout=T) == in_actor.pop("actor_id")
    out: dict[str, Any] = {
        "task": ray.get(task_context.remote(), timeout=T),
        "actor": in_actor,
        "driver_task_name": outcome(ctx.get_task_name),
        "driver_task_id": outcome(ctx.get_task_id),
        "driver_actor_id": outcome(ctx.get_actor_id),
        "driver_summary_keys": sorted(ctx.get()),
        "wait_nothing": outcome(lambda: ray.wait([])),
    }
    ray.kill(box)
    events = ray.timeline()
    out["timeline"] = {
        "has_events": bool(events),
        "all_have_cat": all("cat" in e for e in events),
    }
    # The keys every task span (a Chrome trace "X" event) has.
    spans = [set(e) for e in events if e.get("ph") == "X"] or [set()]
    keys = {"cat", "name", "pid", "tid", "ts", "dur", "ph", "args"}
    OWN["timeline_span_keys"] = sorted(set.intersection(*spans) & keys)
    return out


def own_cases(ray: Any, tmp: str) -> dict:
    """The cases where Ember means to differ from Ray."""

    @ray.remote(concurrency_groups={"io": 1})
    class Grouped:
        def plain(self) -> str:
            return "plain"

    @ray.remote
    def from_py_modules() -> str:
        import sem_task_lib

        return sem_task_lib.hello()

    out: dict[str, Any] = dict(OWN)
    grouped = Grouped.remote()  # (sys.exit's forms: ray_actor_semantics_programs.py)
    unknown = grouped.plain.options(concurrency_group="nope")
    out["unknown_group"] = outcome(lambda: ray.get(unknown.remote(), timeout=T), "nope")
    ray.kill(grouped)
    lib = os.path.join(tmp, "mods", "sem_task_lib")

    def task_py_modules() -> Any:
        task = from_py_modules.options(runtime_env={"py_modules": [lib]})
        return ray.get(task.remote(), timeout=T)

    out["task_py_modules_dir"] = outcome(task_py_modules)

    @ray.remote
    def ran() -> str:
        return "ran"

    def unknown_key() -> Any:
        task = ran.options(runtime_env={"colour": "blue"})
        return ray.get(task.remote(), timeout=T)

    out["runtime_env_unknown_key"] = outcome(unknown_key, "colour")
    if sys.argv[1] != "ray":  # Ray would install the package: not a thing for a test to do
        out["pip"] = outcome(lambda: from_py_modules.options(runtime_env={"pip": ["x"]}), "pip")
    return out


def make_files(tmp: str) -> str:
    """The job's working directory and a py_modules package; returns the working dir."""
    work = Path(tmp, "work")
    work.mkdir()
    (work / "sem_wd_helper.py").write_text("MARK = 'from the working dir'\n")
    (work / "data.txt").write_text("read relative to the working dir")
    (work / "skip.bin").write_bytes(b"excluded")
    for name in ("sem_lib", "sem_task_lib"):
        lib = Path(tmp, "mods", name)
        lib.mkdir(parents=True)
        (lib / "__init__.py").write_text(f"def hello():\n    return 'hello from {name}'\n")
    return str(work)


SECTIONS = {
    "lifecycle": lifecycle_cases,
    "fault_tolerance": fault_tolerance_cases,
    "errors": error_cases,
    "names": name_cases,
    "concurrency": concurrency_cases,
    "cancel": cancel_cases,
    "placement": placement_cases,
    "runtime_env": runtime_env_cases,
    "context": context_cases,
}


def run_sections(ray: Any, sections: dict[str, Any], tmp: str) -> tuple[dict, dict]:
    """Each section's outcomes (a crash is its outcome) and its seconds."""
    same: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for section, cases in sections.items():
        started = time.monotonic()
        try:
            same[section] = cases(ray, tmp)
        except Exception as e:  # noqa: BLE001 - one section's crash is its outcome
            same[section] = ["section crashed", kinds(e), str(e)[:300]]
        timings[section] = round(time.monotonic() - started, 2)
    return same, timings


def main(name: str) -> None:
    ray = importlib.import_module(name)
    with tempfile.TemporaryDirectory(prefix="sem-", dir="/tmp") as tmp:
        workdir = make_files(tmp)
        env = {
            "env_vars": {"SEM_JOB": "job", "SEM_BOTH": "job"},
            "working_dir": workdir,
            "py_modules": [os.path.join(tmp, "mods", "sem_lib")],
            "excludes": ["*.bin"],
        }
        ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, runtime_env=env)
        try:
            same, timings = run_sections(ray, SECTIONS, tmp)
            own = own_cases(ray, tmp)
        finally:
            ray.shutdown()
    print(json.dumps({"same": same, "own": own, "seconds": timings}, sort_keys=True, default=repr))


if __name__ == "__main__":
    main(sys.argv[1])
