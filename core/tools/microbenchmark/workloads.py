"""The rows: Ray's benchmark functions and classes bound to a runtime module (``define``) and the workloads built on them, in Ray's order (``select``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

from .timing import MEMORY_ROW, STARTUP_ROW


def define(rt: ModuleType) -> SimpleNamespace:
    """Ray's benchmark functions and classes, decorated with ``rt.remote``.

    They are defined inside this function so that cloudpickle ships them by value: the
    workers need neither this module nor any path to it.
    """

    @rt.remote
    def small_value() -> bytes:
        return b"ok"

    @rt.remote
    def small_value_batch(n: int) -> int:
        submitted = [small_value.remote() for _ in range(n)]
        rt.get(submitted)
        return 0

    @rt.remote
    def create_object_containing_ref() -> list:
        obj_refs = []
        for _ in range(10000):
            obj_refs.append(rt.put(1))
        return obj_refs

    @rt.remote
    def do_put_small() -> None:
        for _ in range(100):
            rt.put(0)

    @rt.remote
    def do_put() -> None:
        import numpy as np

        for _ in range(10):
            rt.put(np.zeros(10 * 1024 * 1024, dtype=np.int64))

    @rt.remote(num_cpus=0)
    class Actor:
        def small_value(self) -> bytes:
            return b"ok"

        def small_value_arg(self, x: object) -> bytes:
            return b"ok"

        def small_value_batch(self, n: int) -> None:
            rt.get([small_value.remote() for _ in range(n)])

    @rt.remote
    class AsyncActor:
        async def small_value(self) -> bytes:
            return b"ok"

        async def small_value_with_arg(self, x: object) -> bytes:
            return b"ok"

        async def small_value_batch(self, n: int) -> None:
            await asyncio.wait([small_value.remote() for _ in range(n)])

    # Not in Ray's list: streaming generators (rows marked extra, below).
    @rt.remote
    def stream_items(n: int):
        for _ in range(n):
            yield b"ok"

    @rt.remote(num_cpus=0)
    class Streamer:
        def stream_items(self, n: int):
            for _ in range(n):
                yield b"ok"

    @rt.remote(num_cpus=0)
    class Client:
        def __init__(self, servers: object) -> None:
            if not isinstance(servers, list):
                servers = [servers]
            self.servers = servers

        def small_value_batch(self, n: int) -> None:
            results = []
            for s in self.servers:
                results.extend([s.small_value.remote() for _ in range(n)])
            rt.get(results)

        def small_value_batch_arg(self, n: int) -> None:
            x = rt.put(0)
            results = []
            for s in self.servers:
                results.extend([s.small_value_arg.remote(x) for _ in range(n)])
            rt.get(results)

    def make_work(n_cpu: int, n: int) -> Any:
        # ray_perf.py defines this task (twice: `work`, `async_actor_work`) inside main().
        @rt.remote
        def work(actors: list) -> None:
            rt.get([actors[i % n_cpu].small_value.remote() for i in range(n)])

        return work

    return SimpleNamespace(
        small_value=small_value,
        small_value_batch=small_value_batch,
        create_object_containing_ref=create_object_containing_ref,
        do_put_small=do_put_small,
        do_put=do_put,
        Actor=Actor,
        AsyncActor=AsyncActor,
        Client=Client,
        make_work=make_work,
        stream_items=stream_items,
        Streamer=Streamer,
    )


# --------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------

Bench = tuple[Callable[[], object], float]


@dataclass
class Context:
    rt: ModuleType
    d: SimpleNamespace
    # multiprocessing.cpu_count() // 2, as in ray_perf.py: 1 on a 2-core machine.
    n_cpu: int


@dataclass(frozen=True)
class Workload:
    name: str
    setup: Callable[[Context], Bench] | None
    # "default": inside rt.init(); "pg": inside rt.init(resources={"custom": 100});
    # "spill": inside rt.init() with a 300 MiB store; "probe": in fresh processes.
    session: str = "default"
    # Rows outside Ember's comparison set (Ray's extra rows, and the generator rows that
    # `ray microbenchmark` lacks): run with extra=True.
    extra: bool = False


WORKLOADS: list[Workload] = []


def _workload(
    name: str, *, session: str = "default", extra: bool = False
) -> Callable[[Callable[[Context], Bench]], Callable[[Context], Bench]]:
    def register(setup: Callable[[Context], Bench]) -> Callable[[Context], Bench]:
        WORKLOADS.append(Workload(name, setup, session, extra))
        return setup

    return register


@_workload("single client get calls (Plasma Store)")
def _get_small(c: Context) -> Bench:
    value = c.rt.put(0)

    def get_small() -> None:
        c.rt.get(value)

    return get_small, 1


@_workload("single client put calls (Plasma Store)")
def _put_small(c: Context) -> Bench:
    def put_small() -> None:
        c.rt.put(0)

    return put_small, 1


@_workload("multi client put calls (Plasma Store)", extra=True)
def _put_multi_small(c: Context) -> Bench:
    def put_multi_small() -> None:
        c.rt.get([c.d.do_put_small.remote() for _ in range(10)])

    return put_multi_small, 1000


@_workload("single client put gigabytes")
def _put_large(c: Context) -> Bench:
    import numpy as np

    # 100 Mi int64 = 800 MiB; Ray counts each put as 0.8 "GB".
    arr = np.zeros(100 * 1024 * 1024, dtype=np.int64)

    def put_large() -> None:
        c.rt.put(arr)

    return put_large, 8 * 0.1


@_workload("single client tasks and get batch", extra=True)
def _tasks_and_get_batch(c: Context) -> Bench:
    def small_value_batch() -> int:
        submitted = [c.d.small_value.remote() for _ in range(1000)]
        c.rt.get(submitted)
        return 0

    return small_value_batch, 1  # Ray counts batches, not tasks, here


@_workload("multi client put gigabytes", extra=True)
def _put_multi(c: Context) -> Bench:
    def put_multi() -> None:
        c.rt.get([c.d.do_put.remote() for _ in range(10)])

    return put_multi, 10 * 8 * 0.1


@_workload("single client get object containing 10k refs", extra=True)
def _get_containing_refs(c: Context) -> Bench:
    obj_containing_ref = c.d.create_object_containing_ref.remote()

    def get_containing_object_ref() -> None:
        c.rt.get(obj_containing_ref)

    return get_containing_object_ref, 1


@_workload("single client wait 1k refs")
def _wait_1k(c: Context) -> Bench:
    def wait_multiple_refs() -> None:
        num_objs = 1000
        not_ready = [c.d.small_value.remote() for _ in range(num_objs)]
        # Ray triggers the fetch once; the raylet keeps the fetch requests.
        fetch_local = True
        for _ in range(num_objs):
            _ready, not_ready = c.rt.wait(not_ready, fetch_local=fetch_local)
            if fetch_local:
                fetch_local = False

    return wait_multiple_refs, 1  # one batch of 1000 submissions + 1000 waits per "call"


@_workload("single client tasks sync")
def _tasks_sync(c: Context) -> Bench:
    def small_task() -> None:
        c.rt.get(c.d.small_value.remote())

    return small_task, 1


@_workload("single client tasks async")
def _tasks_async(c: Context) -> Bench:
    def small_task_async() -> None:
        c.rt.get([c.d.small_value.remote() for _ in range(1000)])

    return small_task_async, 1000


@_workload("multi client tasks async", extra=True)
def _multi_client_tasks(c: Context) -> Bench:
    n, m = 10000, 4
    actors = [c.d.Actor.remote() for _ in range(m)]

    def multi_task() -> None:
        submitted = [a.small_value_batch.remote(n) for a in actors]
        c.rt.get(submitted)

    return multi_task, n * m


@_workload("1:1 actor calls sync")
def _actor_sync(c: Context) -> Bench:
    a = c.d.Actor.remote()

    def actor_sync() -> None:
        c.rt.get(a.small_value.remote())

    return actor_sync, 1


@_workload("1:1 actor calls async")
def _actor_async(c: Context) -> Bench:
    a = c.d.Actor.remote()

    def actor_async() -> None:
        c.rt.get([a.small_value.remote() for _ in range(1000)])

    return actor_async, 1000


@_workload("1:1 actor calls concurrent")
def _actor_concurrent(c: Context) -> Bench:
    # "concurrent" = a threaded actor: sync methods run on a pool of 16 threads.
    a = c.d.Actor.options(max_concurrency=16).remote()

    def actor_concurrent() -> None:
        c.rt.get([a.small_value.remote() for _ in range(1000)])

    return actor_concurrent, 1000


@_workload("1:n actor calls async")
def _actor_1_n(c: Context) -> Bench:
    # The caller is a Client *actor*, not the driver: the driver sends one call per batch.
    n = 5000
    actors = [c.d.Actor.remote() for _ in range(c.n_cpu)]
    client = c.d.Client.remote(actors)

    def actor_async_direct() -> None:
        c.rt.get(client.small_value_batch.remote(n))

    return actor_async_direct, n * len(actors)


@_workload("n:n actor calls async")
def _actor_n_n(c: Context) -> Bench:
    # m=4 tasks (1 CPU each) spread 5000 calls each over n_cpu actors.
    n, m = 5000, 4
    actors = [c.d.Actor.remote() for _ in range(c.n_cpu)]
    work = c.d.make_work(c.n_cpu, n)

    def actor_multi2() -> None:
        c.rt.get([work.remote(actors) for _ in range(m)])

    return actor_multi2, m * n


@_workload("n:n actor calls with arg async", extra=True)
def _actor_n_n_arg(c: Context) -> Bench:
    n = 1000
    actors = [c.d.Actor.remote() for _ in range(c.n_cpu)]
    clients = [c.d.Client.remote(a) for a in actors]

    def actor_multi2_direct_arg() -> None:
        c.rt.get([client.small_value_batch_arg.remote(n) for client in clients])

    return actor_multi2_direct_arg, n * len(clients)


@_workload("1:1 async-actor calls sync")
def _async_actor_sync(c: Context) -> Bench:
    a = c.d.AsyncActor.remote()

    def actor_sync() -> None:
        c.rt.get(a.small_value.remote())

    return actor_sync, 1


@_workload("1:1 async-actor calls async")
def _async_actor_async(c: Context) -> Bench:
    a = c.d.AsyncActor.remote()

    def async_actor() -> None:
        c.rt.get([a.small_value.remote() for _ in range(1000)])

    return async_actor, 1000


@_workload("1:1 async-actor calls with args async", extra=True)
def _async_actor_args(c: Context) -> Bench:
    a = c.d.AsyncActor.remote()

    def async_actor() -> None:
        c.rt.get([a.small_value_with_arg.remote(i) for i in range(1000)])

    return async_actor, 1000


@_workload("1:n async-actor calls async", extra=True)
def _async_actor_1_n(c: Context) -> Bench:
    n = 5000
    actors = [c.d.AsyncActor.remote() for _ in range(c.n_cpu)]
    client = c.d.Client.remote(actors)

    def async_actor_async() -> None:
        c.rt.get(client.small_value_batch.remote(n))

    return async_actor_async, n * len(actors)


@_workload("n:n async-actor calls async", extra=True)
def _async_actor_n_n(c: Context) -> Bench:
    n, m = 5000, 4
    actors = [c.d.AsyncActor.remote() for _ in range(c.n_cpu)]
    work = c.d.make_work(c.n_cpu, n)

    def async_actor_multi() -> None:
        c.rt.get([work.remote(actors) for _ in range(m)])

    return async_actor_multi, m * n


@_workload("single client streaming generator items", extra=True)
def _generator_items(c: Context) -> Bench:
    def generator_items() -> None:
        for ref in c.d.stream_items.remote(1000):
            c.rt.get(ref)

    return generator_items, 1000  # items read, as each arrives


@_workload("1:1 actor streaming generator items", extra=True)
def _actor_generator_items(c: Context) -> Bench:
    a = c.d.Streamer.remote()

    def actor_generator_items() -> None:
        for ref in a.stream_items.remote(1000):
            c.rt.get(ref)

    return actor_generator_items, 1000


# Spilled objects (Ember's rows; `ray microbenchmark` has none, Ray runs them alike): a
# session with a small store, and more large objects held than it can keep in memory, so
# each put spills an older object and each get reads one back from disk.
SPILL_STORE_BYTES = 300 * 1024 * 1024
SPILL_OBJECT_INTS = 100 * 1024 * 1024 // 8  # 100 MiB, counted as 0.1 "GB" as Ray counts
SPILL_HELD = 6  # 600 MiB of live objects in a 300 MiB store


@_workload("single client put gigabytes (spilled)", session="spill", extra=True)
def _put_spilled(c: Context) -> Bench:
    import numpy as np

    arr = np.ones(SPILL_OBJECT_INTS, dtype=np.int64)
    held: list = []

    def put_spilled() -> None:
        held.append(c.rt.put(arr))
        if len(held) > SPILL_HELD:
            del held[0]

    return put_spilled, 0.1


@_workload("single client get gigabytes (spilled)", session="spill", extra=True)
def _get_spilled(c: Context) -> Bench:
    import numpy as np

    refs = [c.rt.put(np.full(SPILL_OBJECT_INTS, i, dtype=np.int64)) for i in range(SPILL_HELD)]
    turn = [0]

    def get_spilled() -> None:
        # Round robin over more than the store holds: the next one is always on disk.
        ref = refs[turn[0] % SPILL_HELD]
        turn[0] += 1
        if int(c.rt.get(ref)[-1]) != (turn[0] - 1) % SPILL_HELD:
            raise AssertionError("a spilled object came back with the wrong bytes")

    return get_spilled, 0.1


# Not in `ray microbenchmark`: actors created and ended, anonymous and named. Every creation
# is a GCS write (the actor's record), so these rows show what durable storage costs
# (EMBER_GCS_STORAGE=memory: | sqlite:PATH | redis://HOST:PORT picks the GCS's storage).
NUM_ACTORS = 10


def _create_and_end(c: Context, named: bool) -> Callable[[], None]:
    counter = iter(range(10**9))

    def actor_lifecycle() -> None:
        if named:
            names = [f"bench-{next(counter)}" for _ in range(NUM_ACTORS)]
            actors = [c.d.Streamer.options(name=n).remote() for n in names]
            # Found by name, as a second process would, then called (the creator's handles
            # stay: a named actor still ends with the last of them).
            found = [c.rt.get_actor(n) for n in names]
        else:
            actors = found = [c.d.Streamer.remote() for _ in range(NUM_ACTORS)]
        c.rt.get([a.__ray_ready__.remote() for a in found])
        for a in actors:
            c.rt.kill(a)

    return actor_lifecycle


@_workload("actor creation", extra=True)
def _actor_creation(c: Context) -> Bench:
    return _create_and_end(c, named=False), NUM_ACTORS


@_workload("named actor creation and get_actor", extra=True)
def _named_actor_creation(c: Context) -> Bench:
    return _create_and_end(c, named=True), NUM_ACTORS


NUM_PGS = 100
NUM_BUNDLES = 1


@_workload("placement group create/removal", session="pg")
def _placement_groups(c: Context) -> Bench:
    util = c.rt.util

    def placement_group_create_removal() -> None:
        pgs = [
            util.placement_group(bundles=[{"custom": 0.001} for _ in range(NUM_BUNDLES)])
            for _ in range(NUM_PGS)
        ]
        for pg in pgs:
            # Ray waits through the GCS (pg.wait); pg.ready() would run a task per group.
            if hasattr(pg, "wait"):
                pg.wait(timeout_seconds=30)
            else:
                c.rt.get(pg.ready(), timeout=30)
        # Removal is part of the row, or later groups would slow down.
        for pg in pgs:
            util.remove_placement_group(pg)

    return placement_group_create_removal, NUM_PGS


WORKLOADS.append(Workload(STARTUP_ROW, None, session="probe"))
WORKLOADS.append(Workload(MEMORY_ROW, None, session="probe"))

SESSION_INIT_KWARGS: dict[str, dict[str, Any]] = {
    "default": {},
    "pg": {"resources": {"custom": 100}},
    "spill": {"object_store_memory": SPILL_STORE_BYTES},
}


def select(filter: str | None = None, *, extra: bool = False) -> list[Workload]:
    """The rows a run with this filter measures, in Ray's order."""
    return [w for w in WORKLOADS if (extra or not w.extra) and (not filter or filter in w.name)]
