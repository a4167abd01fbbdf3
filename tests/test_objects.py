"""Objects: put/get/wait, ObjectRef, zero-copy reads, reference counting, a full store,
unpicklable values and borrowed refs. Real processes, no mocks."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import decimal
import enum
import fractions
import gc
import os
import pickle
import re
import sys
import threading
import time
import uuid

import cloudpickle
import ember
import numpy as np
import pytest
from ember.exceptions import GetTimeoutError, ObjectStoreFullError
from ember_test_utils import wait_until

MB = 1024 * 1024

# Workers cannot import this test module (as in Ray, where only the driver script's directory
# and working directory reach a worker's sys.path), so its classes travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- helpers -----------------------------------------------------------------------------
@ember.remote
def identity(x):
    return x


def _wait_for_file(path, timeout=60.0):
    """Blocks until ``path`` exists (the test creates it to release the task)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)
    return "released"


wait_for_file = ember.remote(_wait_for_file)


@pytest.fixture
def gate(tmp_path):
    """A file-based signal: tasks wait for it; it is always opened at the end of the test."""
    path = str(tmp_path / "gate")
    yield path
    open(path, "w").close()


def open_gate(path):
    open(path, "w").close()


def store_used() -> int:
    stats = ember.global_state.worker.call_raylet_sync("node_stats", None)
    return stats["store"]["used_bytes"]


class Color(enum.Enum):
    RED = 1
    GREEN = 2


@dataclasses.dataclass
class Point:
    x: int
    y: float
    tags: list


class ZeroCopyByteArray(bytearray):
    """The Python docs' pickle-5 example: out-of-band buffers, read back without a copy."""

    def __reduce_ex__(self, protocol):
        if protocol >= 5:
            return type(self)._reconstruct, (pickle.PickleBuffer(self),), None
        return type(self)._reconstruct, (bytearray(self),)

    @classmethod
    def _reconstruct(cls, obj):
        with memoryview(obj) as m:
            if type(m.obj) is cls:  # in-band, or the same process: the original object
                return m.obj
            # Out of band: ``m`` views exactly the object's bytes (``m.obj`` may be the
            # whole shared-memory arena), so copy from the view.
            return cls(m)


# -- put / get ---------------------------------------------------------------------------
VALUES = [
    0,
    -(2**70),
    3.5,
    float("inf"),
    1 + 2j,
    True,
    None,
    "",
    "héllo wörld ✓",
    b"\x00\xffbytes",
    bytearray(b"abc"),
    (1, "two", 3.0),
    [1, [2, [3, []]]],
    {"a": 1, 2: "b", (3, 4): [5]},
    {1, 2, 3},
    frozenset({"x"}),
    collections.OrderedDict([("z", 1), ("a", 2)]),
    collections.Counter("mississippi"),
    decimal.Decimal("1.10"),
    fractions.Fraction(3, 7),
    uuid.UUID(int=12345),
    Color.GREEN,
    Point(1, 2.5, ["t"]),
    range(3, 30, 3),
    "x" * (300 * 1024),  # a large string goes through the shared-memory store
    b"y" * (300 * 1024),
    list(range(50_000)),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_put_get_round_trips_many_types(shared_node, value):
    ref = ember.put(value)
    assert isinstance(ref, ember.ObjectRef)
    out = ember.get(ref)
    assert type(out) is type(value)
    assert out == value
    # and through a task (argument and return)
    assert ember.get(identity.remote(value)) == value


def test_put_get_numpy_arrays(shared_node):
    for arr in [
        np.arange(10),
        np.zeros((3, 4), dtype=np.float32),
        np.arange(3_000_000, dtype=np.int64).reshape(1000, 3000),  # large: shared memory
        np.array(["a", "bc"]),
        np.array([1.5, np.nan]),
        np.arange(20)[::3],  # non-contiguous
        np.asfortranarray(np.arange(200_000, dtype=np.float64).reshape(400, 500)),
    ]:
        out = ember.get(ember.put(arr))
        assert out.dtype == arr.dtype and out.shape == arr.shape
        np.testing.assert_array_equal(out, arr)


def test_put_get_functions_and_closures(shared_node):
    k = 7

    def f(x):
        return x * k

    assert ember.get(ember.put(f))(6) == 42
    assert ember.get(ember.put(lambda: "lam"))() == "lam"


def test_get_of_a_list_preserves_order_and_mixes_sources(shared_node):
    refs = [ember.put(i) for i in range(10)] + [identity.remote(i) for i in range(10, 20)]
    assert ember.get(refs) == list(range(20))
    assert ember.get(tuple(refs[:3])) == [0, 1, 2]
    assert ember.get([]) == []
    same = ember.put("same")
    assert ember.get([same, same, same]) == ["same"] * 3


def test_get_timeout_raises_get_timeout_error(shared_node, gate):
    ref = wait_for_file.remote(gate)
    start = time.monotonic()
    with pytest.raises(GetTimeoutError) as info:
        ember.get(ref, timeout=0.3)
    assert time.monotonic() - start < 5
    assert isinstance(info.value, TimeoutError)
    with pytest.raises(TimeoutError):
        ember.get([ember.put(1), ref], timeout=0)
    open_gate(gate)
    assert ember.get(ref, timeout=30) == "released"


def test_get_of_a_non_ref_raises_value_error_naming_the_type(shared_node):
    with pytest.raises(ValueError, match="int"):
        ember.get(5)
    with pytest.raises(ValueError, match="str"):
        ember.get([ember.put(1), "not a ref"])
    with pytest.raises(ValueError, match="dict"):
        ember.get({"a": ember.put(1)})


def test_put_of_an_object_ref_raises_type_error(shared_node):
    ref = ember.put(1)
    with pytest.raises(TypeError):
        ember.put(ref)
    # Nesting a ref inside a container is fine.
    assert ember.get(ember.get(ember.put([ref]))[0]) == 1


# -- wait --------------------------------------------------------------------------------
def test_wait_num_returns(shared_node):
    refs = [ember.put(i) for i in range(5)]
    ready, not_ready = ember.wait(refs, num_returns=3, timeout=10)
    assert len(ready) == 3 and len(not_ready) == 2
    assert set(ready) | set(not_ready) == set(refs)
    ready, not_ready = ember.wait(refs, num_returns=5)
    assert ready == refs and not_ready == []
    ready, not_ready = ember.wait(refs)  # default num_returns=1
    assert len(ready) == 1 and len(not_ready) == 4


def test_wait_timeout_returns_partial(shared_node, gate):
    slow = wait_for_file.remote(gate)
    fast = identity.remote("fast")
    start = time.monotonic()
    ready, not_ready = ember.wait([slow, fast], num_returns=2, timeout=1.0)
    elapsed = time.monotonic() - start
    assert ready == [fast]
    assert not_ready == [slow]
    assert 0.9 <= elapsed < 10
    ready, not_ready = ember.wait([slow], timeout=0)
    assert ready == [] and not_ready == [slow]
    open_gate(gate)
    ready, not_ready = ember.wait([slow, fast], num_returns=2, timeout=30)
    assert ready == [slow, fast] and not_ready == []


def test_wait_rejects_duplicates_and_too_many(shared_node):
    a, b = ember.put(1), ember.put(2)
    with pytest.raises(ValueError):
        ember.wait([a, a])
    with pytest.raises(ValueError):
        ember.wait([a, b], num_returns=3)
    with pytest.raises(TypeError):
        ember.wait(a)


def test_wait_ready_list_keeps_input_order(shared_node, gate):
    slow = wait_for_file.remote(gate)
    # Finished in reverse order of the list below.
    done = [ember.put(i) for i in range(4)]
    ordered = [done[3], slow, done[1], done[0], done[2]]
    ready, not_ready = ember.wait(ordered, num_returns=4, timeout=30)
    assert ready == [done[3], done[1], done[0], done[2]]
    assert not_ready == [slow]
    open_gate(gate)
    ready, not_ready = ember.wait(ordered, num_returns=5, timeout=30)
    assert ready == ordered


def test_wait_not_ready_keeps_input_order_around_the_ready_ones(shared_node, gate):
    slow_a = wait_for_file.remote(gate)
    slow_b = wait_for_file.remote(gate)
    done = [ember.put(i) for i in range(3)]
    listed = [slow_a, done[0], slow_b, done[1], done[2]]
    ready, not_ready = ember.wait(listed, num_returns=2, timeout=30)
    assert ready == [done[0], done[1]]
    assert not_ready == [slow_a, slow_b, done[2]]
    open_gate(gate)


def test_wait_one_at_a_time_drains_every_ref_once(shared_node):
    refs = [identity.remote(i) for i in range(300)]
    seen = []
    not_ready = list(refs)
    while not_ready:
        ready, not_ready = ember.wait(not_ready, timeout=60)
        assert len(ready) == 1
        seen.append(ready[0])
    assert sorted(seen, key=refs.index) == refs and len(set(seen)) == len(refs)


def test_wait_wakes_for_the_last_of_many_pending_refs(shared_node, gate):
    # 50 refs stay pending behind a gate (49 wait for the gated one as their argument); the
    # one that finishes is listed last and finishes after wait began: wait must see it then.
    slow = wait_for_file.remote(gate)
    pending = [slow] + [identity.remote(slow) for _ in range(49)]

    @ember.remote
    def after(seconds: float) -> str:
        time.sleep(seconds)
        return "late"

    last = after.remote(0.5)
    start = time.monotonic()
    ready, not_ready = ember.wait([*pending, last], timeout=30)
    assert ready == [last] and not_ready == pending
    assert time.monotonic() - start < 20
    open_gate(gate)
    ready, not_ready = ember.wait(pending, num_returns=50, timeout=60)
    assert ready == pending and not_ready == []


def test_wait_names_a_non_ref_element(shared_node):
    with pytest.raises(TypeError, match="found a str"):
        ember.wait([ember.put(1), "not a ref"])


@ember.remote
def value_after(seconds, value):
    time.sleep(seconds)  # keeps the result pending while the driver starts waiting
    return value


def test_get_of_a_list_with_a_pending_ref_twice(shared_node):
    slow = value_after.remote(0.3, "late")
    assert ember.get([slow, slow, ember.put(3)], timeout=30) == ["late", "late", 3]


# -- ObjectRef ---------------------------------------------------------------------------
def test_object_ref_hex_equality_hash_and_alias(shared_node):
    ref = ember.put("v")
    h = ref.hex()
    assert re.fullmatch(r"[0-9a-f]{40}", h), h
    assert h in repr(ref)
    other = ember.put("v")
    assert other != ref and other.hex() != h
    copy = pickle.loads(pickle.dumps(ref))
    assert copy == ref and hash(copy) == hash(ref)
    assert len({ref, copy, other}) == 2
    assert ref != h and ref != ref.binary() and ref is not None
    assert ember.ObjectID is ember.ObjectRef
    assert isinstance(identity.remote(1), ember.ObjectID)
    assert ref.binary() == bytes.fromhex(h)


def test_await_ref_in_asyncio(shared_node):
    async def main():
        a = await identity.remote(21)
        b = await ember.put("put")
        return a, b

    assert asyncio.run(main()) == (21, "put")


def test_ref_future_result(shared_node, gate):
    fut = identity.remote({"k": 1}).future()
    assert fut.result(timeout=30) == {"k": 1}
    pending = wait_for_file.remote(gate).future()
    assert not pending.done()
    open_gate(gate)
    assert pending.result(timeout=30) == "released"


def test_future_of_a_failing_task_carries_the_error(shared_node):
    @ember.remote
    def boom():
        raise KeyError("nope")

    with pytest.raises(KeyError):
        boom.remote().future().result(timeout=30)

    async def main():
        await boom.remote()

    with pytest.raises(KeyError):
        asyncio.run(main())


def test_asyncio_wait_for_timeout_cancels_cleanly(shared_node, gate):
    slow = wait_for_file.remote(gate)

    async def timed_out():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(slow.as_future(), timeout=0.3)
        futs = [slow.future() for _ in range(5)]
        for f in futs:
            f.cancel()

    asyncio.run(timed_out())
    open_gate(gate)
    # The cancelled futures must not disturb later reads of the same or other objects.
    assert ember.get(slow, timeout=30) == "released"
    assert ember.get(identity.remote("after"), timeout=30) == "after"

    async def again():
        return await slow

    assert asyncio.run(again()) == "released"


def test_refs_with_asyncio_wait(shared_node, gate):
    async def main():
        fast = identity.remote("a")
        slow = wait_for_file.remote(gate)
        done, pending = await asyncio.wait(
            [asyncio.ensure_future(fast), asyncio.ensure_future(slow)], timeout=1.0
        )
        assert len(done) == 1 and len(pending) == 1
        assert done.pop().result() == "a"
        open_gate(gate)
        done, pending = await asyncio.wait(pending, timeout=30)
        assert not pending
        return done.pop().result()

    assert asyncio.run(main()) == "released"


def test_asyncio_wait_on_ref_as_future(shared_node):
    async def main():
        refs = [identity.remote(i) for i in range(3)]
        done, pending = await asyncio.wait([r.as_future() for r in refs], timeout=30)
        assert not pending
        return sorted(f.result() for f in done)

    assert asyncio.run(main()) == [0, 1, 2]


def test_ref_future_done_callback_runs(shared_node):
    seen = []
    fired = threading.Event()

    def cb(fut):
        seen.append(fut.result())
        fired.set()

    identity.remote("cb").future().add_done_callback(cb)
    assert fired.wait(30)
    assert seen == ["cb"]


def test_get_from_many_threads(shared_node):
    results = {}
    errors = []

    def run(i):
        try:
            results[i] = ember.get([identity.remote(i * 100 + j) for j in range(20)], timeout=60)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors, errors
    assert results == {i: [i * 100 + j for j in range(20)] for i in range(8)}


def test_asyncio_gather_of_refs(shared_node):
    async def main():
        return await asyncio.gather(*[identity.remote(i) for i in range(10)])

    assert asyncio.run(main()) == list(range(10))


# -- zero copy ---------------------------------------------------------------------------
def test_large_numpy_array_is_read_only_and_shared(shared_node):
    arr = np.arange(4_000_000, dtype=np.float64)
    ref = ember.put(arr)
    a = ember.get(ref)
    b = ember.get(ref)
    assert a.flags.writeable is False
    assert a.base is not None
    with pytest.raises(ValueError):
        a[0] = 1.0
    assert np.shares_memory(a, b)
    np.testing.assert_array_equal(a, arr)
    # A task's large return is read-only too.
    out = ember.get(identity.remote(arr))
    assert out.flags.writeable is False and out.base is not None
    del a, b, out


def test_large_array_argument_is_read_only_in_the_task(shared_node):
    @ember.remote
    def inspect_arg(x):
        return x.flags.writeable, x.base is not None, float(x.sum())

    arr = np.ones(2_000_000)
    writeable, has_base, total = ember.get(inspect_arg.remote(arr), timeout=30)
    assert writeable is False and has_base and total == 2_000_000
    writeable, has_base, total = ember.get(inspect_arg.remote(ember.put(arr)), timeout=30)
    assert writeable is False and has_base and total == 2_000_000


def test_pickle5_buffer_objects_round_trip(shared_node):
    small = ZeroCopyByteArray(b"abc" * 10)
    big = ZeroCopyByteArray(os.urandom(2 * MB))
    for value in (small, big):
        out = ember.get(ember.put(value))
        assert isinstance(out, ZeroCopyByteArray)
        assert bytes(out) == bytes(value)
        out2 = ember.get(identity.remote(value))
        assert isinstance(out2, ZeroCopyByteArray)
        assert bytes(out2) == bytes(value)
    pb = ember.get(ember.put({"buf": pickle.PickleBuffer(b"raw-bytes" * 100_000)}))
    assert bytes(pb["buf"]) == b"raw-bytes" * 100_000


# -- reference counting ------------------------------------------------------------------
def _block_until(path, timeout=60.0):
    """Inside a task: waits (bounded) until the test opens the gate file."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def _baseline():
    """Store usage once frees from earlier tests (asynchronous, as in Ray) have landed."""
    gc.collect()
    last = store_used()

    def settled():
        nonlocal last
        time.sleep(0.1)
        now = store_used()
        same, last = now == last, now
        return same

    wait_until(settled, 10, interval=0, message="store usage to settle")
    return last


def test_deleting_a_ref_frees_store_memory(shared_node):
    base = _baseline()
    ref = ember.put(np.ones(20 * MB // 8))
    assert store_used() >= base + 20 * MB
    value = ember.get(ref)
    assert value.sum() == 20 * MB // 8
    del value, ref
    gc.collect()
    wait_until(lambda: store_used() < base + MB, 10, message="store usage to drop after del")


def test_value_from_get_keeps_memory_until_dropped(shared_node):
    base = _baseline()
    ref = ember.put(np.ones(20 * MB // 8))
    value = ember.get(ref)
    del ref
    gc.collect()
    time.sleep(0.3)  # give a wrong free a chance to happen before checking it did not
    # The value is still readable and its memory still held: it cannot have been reused.
    assert store_used() >= base + 20 * MB
    assert value.sum() == 20 * MB // 8
    tail = value[10:]  # a derived view keeps the pin too
    del value
    gc.collect()
    time.sleep(0.3)
    assert store_used() >= base + 20 * MB
    assert tail.sum() == 20 * MB // 8 - 10
    del tail
    gc.collect()
    wait_until(lambda: store_used() < base + MB, 10, message="store usage to drop")


def _pinned_by_readers() -> int:
    stats = ember.global_state.worker.call_raylet_sync("node_stats", None)
    return stats["store"]["num_pinned_by_readers"]


def test_a_released_get_keeps_its_pin_a_moment_then_gives_it_back(shared_node):
    """A get's pin outlives its value by about a second, so the next get of the same object
    needs no raylet call; it goes by itself, and at once when the ref goes."""
    base = _baseline()
    assert _pinned_by_readers() == 0
    ref = ember.put(np.arange(4 * MB // 8))
    value = ember.get(ref)
    del value
    gc.collect()
    assert _pinned_by_readers() == 1  # held, not yet given back
    for i in range(20):  # each get of a held object maps it again: same values
        assert int(ember.get(ref)[i * 1000]) == i * 1000
    gc.collect()
    wait_until(lambda: _pinned_by_readers() == 0, 10, message="the held pin to be given back")
    assert store_used() >= base + 4 * MB  # the object itself stays: the ref lives
    value = ember.get(ref)
    del value, ref
    gc.collect()
    wait_until(lambda: store_used() < base + MB, 10, message="the object freed with its ref")
    assert _pinned_by_readers() == 0


def test_a_get_of_many_shared_memory_objects_pins_each_and_reads_each(shared_node):
    refs = [ember.put(np.full(MB // 8, i)) for i in range(12)]
    values = ember.get(refs + refs[:3])  # repeats too
    assert [int(v[0]) for v in values] == list(range(12)) + [0, 1, 2]
    assert _pinned_by_readers() == 12
    del values, refs
    gc.collect()
    wait_until(lambda: _pinned_by_readers() == 0, 10, message="every pin given back")


def test_deleting_a_large_task_return_frees_store_memory(shared_node):
    @ember.remote
    def big():
        return np.ones(20 * MB // 8)

    base = _baseline()
    ref = big.remote()
    assert ember.get(ref, timeout=30).sum() == 20 * MB // 8
    gc.collect()
    assert store_used() >= base + 20 * MB
    del ref
    gc.collect()
    wait_until(lambda: store_used() < base + MB, 10, message="task return freed after del")


def test_top_level_ref_arg_stays_alive_while_task_is_pending(shared_node, gate):
    base = _baseline()
    blocker = wait_for_file.remote(gate)
    ref = ember.put(np.ones(10 * MB // 8))
    # The task depends on blocker too, so it cannot start before the gate opens.
    result = _sum_after.remote(ref, blocker)
    del ref
    gc.collect()
    time.sleep(0.3)
    assert store_used() >= base + 10 * MB
    open_gate(gate)
    assert ember.get(result, timeout=60) == 10 * MB // 8
    del result, blocker
    gc.collect()
    wait_until(lambda: store_used() < base + MB, 10, message="argument freed after the task")


def test_ref_captured_in_another_object_keeps_inner_alive(shared_node):
    base = _baseline()
    inner = ember.put(np.full(10 * MB // 8, 3.0))
    outer = ember.put({"inner": [inner]})
    del inner
    gc.collect()
    time.sleep(0.3)  # give a wrong free a chance to happen before checking it did not
    assert store_used() >= base + 10 * MB
    got = ember.get(outer)["inner"][0]
    assert ember.get(got)[0] == 3.0
    del got
    gc.collect()
    assert store_used() >= base + 10 * MB
    del outer
    gc.collect()
    wait_until(lambda: store_used() < base + MB, 10, message="inner freed with the outer")


def test_ref_in_list_arg_stays_alive_while_task_runs(shared_node, gate):
    @ember.remote
    def later_sum(container, gate_path):
        _block_until(gate_path)
        return float(ember.get(container[0]).sum())

    base = _baseline()
    ref = ember.put(np.ones(10 * MB // 8))
    result = later_sum.remote([ref], gate)
    del ref
    gc.collect()
    time.sleep(0.3)
    assert store_used() >= base + 10 * MB
    open_gate(gate)
    assert ember.get(result, timeout=60) == 10 * MB // 8
    del result
    gc.collect()
    wait_until(lambda: store_used() < base + MB, 10, message="freed after the task finished")


def test_small_ref_in_list_arg_stays_alive_while_task_runs(shared_node, gate):
    @ember.remote
    def later_get(container, gate_path):
        _block_until(gate_path)
        return ember.get(container[0])

    ref = ember.put("small value")
    result = later_get.remote([ref], gate)
    del ref
    gc.collect()
    time.sleep(0.3)
    open_gate(gate)
    assert ember.get(result, timeout=60) == "small value"


@ember.remote
def _sum_after(x, _blocker):
    return float(x.sum())


def test_ref_passed_on_by_a_borrower_to_a_nested_task_stays_alive(shared_node, gate):
    """driver -> A([ref]) -> B([ref]); A returns, the driver drops its ref, B still reads."""

    @ember.remote
    def reader(container, gate_path):
        _block_until(gate_path)
        return float(ember.get(container[0]).sum())

    @ember.remote
    def spawn(container, gate_path):
        return [reader.remote(container, gate_path)]

    base = _baseline()
    ref = ember.put(np.ones(10 * MB // 8))
    [inner_result] = ember.get(spawn.remote([ref], gate), timeout=30)
    del ref
    gc.collect()
    time.sleep(0.3)
    assert store_used() >= base + 10 * MB
    open_gate(gate)
    assert ember.get(inner_result, timeout=60) == 10 * MB // 8
    del inner_result
    gc.collect()
    wait_until(lambda: store_used() < base + MB, 10, message="freed after the nested task")


@ember.remote
class Keeper:
    def keep(self, container):
        self.kept = container
        return True

    def read(self):
        return float(ember.get(self.kept[0]).sum())

    def drop(self):
        self.kept = None
        import gc as _gc

        _gc.collect()
        return True


def test_actor_holding_a_borrowed_ref_keeps_it_alive(shared_node):
    base = _baseline()
    keeper = Keeper.remote()
    ref = ember.put(np.ones(10 * MB // 8))
    assert ember.get(keeper.keep.remote([ref]), timeout=30)
    del ref
    gc.collect()
    time.sleep(0.3)
    assert store_used() >= base + 10 * MB
    assert ember.get(keeper.read.remote(), timeout=30) == 10 * MB // 8
    assert ember.get(keeper.drop.remote(), timeout=30)
    wait_until(lambda: store_used() < base + MB, 10, message="freed after the actor dropped it")
    ember.kill(keeper)


def test_ref_owned_by_actor_is_freed_when_the_driver_drops_it(shared_node):
    base = _baseline()
    maker = Maker.remote()
    [ref] = ember.get(maker.make.remote(np.ones(10 * MB // 8)), timeout=30)
    assert ember.get(ref, timeout=30).sum() == 10 * MB // 8
    gc.collect()
    assert store_used() >= base + 10 * MB
    del ref
    gc.collect()
    wait_until(lambda: store_used() < base + MB, 10, message="actor-owned object freed")
    ember.kill(maker)


def test_get_of_a_ref_nobody_owns_raises_at_once(shared_node):
    """Issue 19, item 8: a ref rebuilt from bare bytes has no owner to ask; get() used to
    wait for it until its timeout (forever without one). Ray raises a ValueError naming the
    unknown owner; Ember's error is one, and an OwnerDiedError."""
    from ember.exceptions import ObjectUnknownOwnerError, OwnerDiedError
    from ember.ids import OBJECT_ID_SIZE

    @ember.remote
    def first(xs):
        return ember.get(xs[0], timeout=60) if isinstance(xs, list) else xs

    ref = ember.ObjectRef(os.urandom(OBJECT_ID_SIZE))
    for read in (
        lambda: ember.get(ref, timeout=60),
        lambda: ember.get([ref, ember.put(1)], timeout=60),
        lambda: ref.future().result(timeout=60),
        # As an argument, or inside one: the task's worker finds no owner either.
        lambda: ember.get(first.remote([ref]), timeout=60),
        lambda: ember.get(first.remote(ref), timeout=60),
    ):
        started = time.monotonic()
        with pytest.raises(ObjectUnknownOwnerError, match="no known owner") as info:
            read()
        assert time.monotonic() - started < 10
        assert isinstance(info.value, ValueError) and isinstance(info.value, OwnerDiedError)
    ready, _ = ember.wait([ref], timeout=60)
    assert ready == [ref]  # an object that can never come counts as ready, with its error


def test_get_of_a_ref_whose_owner_is_not_there_raises_at_once(shared_node):
    from ember.exceptions import OwnerDiedError
    from ember.ids import OBJECT_ID_SIZE, UNIQUE_ID_SIZE
    from ember_test_utils import free_port

    node_id = ember.get_runtime_context().get_node_id()
    owner = (os.urandom(UNIQUE_ID_SIZE), f"tcp:127.0.0.1:{free_port()}", bytes.fromhex(node_id))
    ref = ember.ObjectRef(os.urandom(OBJECT_ID_SIZE), owner)
    started = time.monotonic()
    with pytest.raises(OwnerDiedError, match="owner is unreachable"):
        ember.get(ref)  # no timeout: it must not wait at all
    assert time.monotonic() - started < 10


def test_get_of_a_ref_whose_owner_died_raises_owner_died(shared_node):
    from ember.exceptions import ObjectLostError, OwnerDiedError

    maker = Maker.remote()
    [small] = ember.get(maker.make.remote("small"), timeout=30)
    [large] = ember.get(maker.make.remote(np.ones(MB)), timeout=30)
    ember.kill(maker)

    def actor_is_dead():
        try:
            ember.get(maker.make.remote(0), timeout=5)
            return False
        except ember.exceptions.ActorDiedError:
            return True

    wait_until(actor_is_dead, 20, interval=0.1, message="the killed actor to be dead")
    # Ray: "If the owner dies, anyone still using the ref receives an OwnerDiedError."
    for ref in (small, large):
        with pytest.raises(ObjectLostError) as info:
            ember.get(ref, timeout=20)
        assert isinstance(info.value, OwnerDiedError), repr(info.value)


@pytest.mark.parametrize("size", ["small", "large"])
def test_task_returning_a_ref_it_put(shared_node, size):
    @ember.remote
    def make(n):
        return ember.put(np.full(n, 7, dtype=np.int64))

    n = 10 if size == "small" else 2_000_000
    base = _baseline()
    inner = ember.get(make.remote(n))
    assert isinstance(inner, ember.ObjectRef)
    value = ember.get(inner, timeout=30)
    assert value.shape == (n,) and value[0] == 7 and value[-1] == 7
    if size == "large":
        del inner, value
        gc.collect()
        wait_until(lambda: store_used() < base + MB, 10, message="worker-owned object freed")

    @ember.remote
    def make_list(n):
        return [ember.put(np.full(n, 8, dtype=np.int64))]

    refs = ember.get(make_list.remote(n))
    gc.collect()
    assert ember.get(refs[0], timeout=30)[-1] == 8


@ember.remote
def _own_one(n):
    return [ember.put(np.full(n, 5, dtype=np.int64))]


@ember.remote
def _spawn_owner(n):
    # Blocks in get: the raylet lends its CPU out and starts a second worker for _own_one.
    # Both workers end up owning an object the driver borrows, whichever one is trimmed.
    return ember.get(_own_one.remote(n)) + [ember.put(np.full(n, 5, dtype=np.int64))]


@pytest.mark.parametrize("size", ["small", "large"])
def test_idle_worker_that_owns_referenced_objects_is_not_reaped(ember_start, monkeypatch, size):
    """Ray never lets an idle worker exit while it owns objects still referenced (its
    CoreWorker refuses the raylet's exit request). Here two workers serve one CPU, so the
    raylet trims one when both are idle; the driver still borrows an object the trimmed one
    may own."""
    monkeypatch.setenv("EMBER_IDLE_WORKER_KILL_SECONDS", "0.5")  # a documented tunable
    ember_start(num_cpus=1)

    def num_workers():
        return ember.global_state.worker.call_raylet_sync("node_stats", None)["num_workers"]

    n = 10 if size == "small" else 1_000_000
    refs = ember.get(_spawn_owner.remote(n), timeout=60)
    assert len(refs) == 2
    assert num_workers() >= 2
    # Well past the idle timeout both owners are still there: each owns an object the driver
    # borrows (the raylet asks before it retires a worker, as Ray's does).
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        assert num_workers() >= 2
        time.sleep(0.1)
    for ref in refs:
        value = ember.get(ref, timeout=20)
        assert value.shape == (n,) and value[0] == 5
    # Once nothing they own is referenced, the extra worker is retired.
    del refs, ref, value
    gc.collect()
    wait_until(lambda: num_workers() == 1, 15, interval=0.1, message="idle workers trimmed")


# -- store full --------------------------------------------------------------------------
@pytest.fixture
def no_spilling(monkeypatch):
    """The node started next keeps every primary copy in memory (tests/test_spilling.py
    covers a full store that spills)."""
    monkeypatch.setenv("EMBER_AUTOMATIC_OBJECT_SPILLING_ENABLED", "0")


def test_object_store_full_error_then_recovers(ember_start, no_spilling):
    ember_start(num_cpus=1, object_store_memory=100 * MB)
    held = []
    with pytest.raises(ObjectStoreFullError) as info:
        for _ in range(10):
            held.append(ember.put(np.ones(30 * MB // 8)))
    assert 1 <= len(held) <= 4
    msg = str(info.value)
    assert re.search(r"\d{6,}", msg), msg  # names sizes in bytes
    assert "bytes" in msg
    del held
    gc.collect()

    def put_works():
        try:
            return ember.put(np.ones(30 * MB // 8))
        except ObjectStoreFullError:
            return None

    ref = wait_until(put_works, 10, interval=0.1, message="put to work after freeing")
    assert ember.get(ref)[0] == 1.0


def test_put_larger_than_the_store_raises_full(ember_start):
    ember_start(num_cpus=1, object_store_memory=100 * MB)
    with pytest.raises(ObjectStoreFullError, match=str(100 * MB)):
        ember.put(np.ones(120 * MB // 8))
    ref = ember.put(np.ones(30 * MB // 8))  # the failed put left nothing behind
    assert ember.get(ref)[0] == 1.0


def test_value_from_get_survives_store_reuse(ember_start):
    ember_start(num_cpus=1, object_store_memory=100 * MB)
    ref = ember.put(np.full(40 * MB // 8, 1.0))
    value = ember.get(ref)
    del ref
    gc.collect()
    # If the reader's pin were dropped with the ref, these would reuse its memory.
    others = [ember.put(np.full(25 * MB // 8, 2.0)) for _ in range(2)]
    assert value.min() == 1.0 and value.max() == 1.0
    assert ember.get(others[0])[0] == 2.0


def test_task_return_too_large_for_the_store_fails_without_hanging(ember_start, no_spilling):
    ember_start(num_cpus=1, object_store_memory=100 * MB)

    @ember.remote(max_retries=0)
    def big():
        return np.ones(60 * MB // 8)

    held = ember.put(np.ones(60 * MB // 8))
    with pytest.raises(ObjectStoreFullError):
        ember.get(big.remote(), timeout=60)
    del held
    gc.collect()

    def big_works():
        try:
            return ember.get(big.remote(), timeout=60)[0] == 1.0
        except ObjectStoreFullError:
            return False

    wait_until(big_works, 20, interval=0.2, message="a large return to fit once freed")


# -- unpicklable values ------------------------------------------------------------------
def test_put_of_unpicklable_value_names_the_type_and_where(shared_node):
    class Holder:
        def __init__(self):
            self.lock = threading.Lock()

    with pytest.raises(TypeError) as info:
        ember.put({"config": {"lock": threading.Lock()}})
    msg = str(info.value)
    assert "_thread.lock" in msg
    assert "lock" in msg and "config" in msg, msg
    with pytest.raises(TypeError) as info:
        ember.put(Holder())
    assert "_thread.lock" in str(info.value)
    assert ".lock" in str(info.value)
    # Passing one to a task fails at the call, with the same message.
    with pytest.raises(TypeError, match="_thread.lock"):
        identity.remote([threading.Lock()])


def test_task_returning_an_unpicklable_value_fails_with_type_error(shared_node):
    @ember.remote
    def bad():
        return threading.Lock()

    with pytest.raises(TypeError, match="_thread.lock"):
        ember.get(bad.remote(), timeout=30)
    assert ember.get(identity.remote("still works"), timeout=30) == "still works"


@ember.remote
def _leaf():
    return "leaf"


@ember.remote
def _calls_leaf():
    return ember.get(_leaf.remote())


@ember.remote
class _CallsLeaf:
    def run(self):
        return ember.get(_leaf.remote())


# This module is pickled by value, as a driver script's __main__ is: a task or actor class
# referring to another remote function carries that RemoteFunction object along.
def test_remote_function_used_by_the_driver_can_be_called_from_a_task(shared_node):
    assert ember.get(_leaf.remote(), timeout=30) == "leaf"  # the driver calls it first
    assert ember.get(_calls_leaf.remote(), timeout=30) == "leaf"


def test_remote_function_used_by_the_driver_can_be_called_from_an_actor(shared_node):
    assert ember.get(_leaf.remote(), timeout=30) == "leaf"
    a = _CallsLeaf.remote()
    assert ember.get(a.run.remote(), timeout=30) == "leaf"
    ember.kill(a)


# -- borrowed refs -----------------------------------------------------------------------
@ember.remote
class Maker:
    def make(self, x):
        return [ember.put(x)]

    def make_many(self, n):
        return [ember.put(i) for i in range(n)]


@pytest.mark.parametrize("size", ["small", "large"])
def test_ref_created_by_actor_can_be_got_by_driver(shared_node, size):
    value = "v" if size == "small" else np.arange(1_000_000)
    maker = Maker.remote()
    [ref] = ember.get(maker.make.remote(value), timeout=30)
    got = ember.get(ref, timeout=30)
    if size == "small":
        assert got == value
    else:
        np.testing.assert_array_equal(got, value)

    # through another task: the task gets it and returns it, and passes the ref on
    @ember.remote
    def passthrough(container):
        return container

    @ember.remote
    def read(container):
        return ember.get(container[0])

    [again] = ember.get(passthrough.remote([ref]), timeout=30)
    assert again == ref
    got2 = ember.get(again, timeout=30)
    got3 = ember.get(read.remote([ref]), timeout=30)
    if size == "small":
        assert got2 == value and got3 == value
    else:
        np.testing.assert_array_equal(got2, value)
        np.testing.assert_array_equal(got3, value)
    ember.kill(maker)


def test_borrowed_ref_captured_in_a_driver_put_stays_readable(shared_node):
    maker = Maker.remote()
    [ref] = ember.get(maker.make.remote(np.arange(500_000)), timeout=30)
    outer = ember.put({"nested": [ref]})
    del ref
    gc.collect()
    [inner] = ember.get(outer)["nested"]
    np.testing.assert_array_equal(ember.get(inner, timeout=30), np.arange(500_000))
    ember.kill(maker)


def test_borrowed_ref_sent_back_to_its_owner_and_on_to_another_actor(shared_node):
    maker = Maker.remote()
    keeper = Keeper.remote()
    [ref] = ember.get(maker.make.remote(np.ones(MB)), timeout=30)

    @ember.remote
    def read_back(container):
        return float(ember.get(container[0]).sum())

    # the owner reads its own object through a ref that travelled out and back
    assert ember.get(maker.make.remote(ref), timeout=30)  # top-level: resolved to the value
    assert ember.get(read_back.remote([ref]), timeout=30) == MB
    # another actor borrows it; the driver drops its ref; the borrower still reads it
    assert ember.get(keeper.keep.remote([ref]), timeout=30)
    del ref
    gc.collect()
    assert ember.get(keeper.read.remote(), timeout=30) == MB
    ember.kill(keeper)
    ember.kill(maker)


def test_ref_to_a_pending_object_owned_by_an_actor(shared_node, gate):
    # A remote function the driver has not called (see the test after the next one).
    waiter = ember.remote(_wait_for_file)

    @ember.remote
    class Spawner:
        def spawn(self, path):
            return [waiter.remote(path)]

    spawner = Spawner.remote()
    [ref] = ember.get(spawner.spawn.remote(gate), timeout=30)
    ready, not_ready = ember.wait([ref], timeout=0.5)
    assert ready == [] and not_ready == [ref]
    with pytest.raises(GetTimeoutError):
        ember.get(ref, timeout=0.3)
    open_gate(gate)
    assert ember.get(ref, timeout=30) == "released"
    ember.kill(spawner)


def test_many_borrowed_refs_from_actor(shared_node):
    maker = Maker.remote()
    refs = ember.get(maker.make_many.remote(50), timeout=30)
    assert ember.get(refs, timeout=30) == list(range(50))
    ember.kill(maker)


# -- garbage collection --------------------------------------------------------------------
def test_refs_collected_while_a_runtime_lock_is_held_do_not_deadlock(shared_node):
    """The garbage collector may run ObjectRef.__del__ in the middle of a locked section of
    the runtime (any allocation can trigger it). It must not wait on that lock."""
    import threading

    worker = ember.global_state.worker
    base = _baseline()
    cycle = [ember.put(np.ones(2 * MB // 8))]
    cycle.append(cycle)  # only the cyclic collector can free this list and its ref
    del cycle
    finished = threading.Event()

    def collect_inside_the_lock():
        with worker.memory_store._lock:
            gc.collect()
        finished.set()

    t = threading.Thread(target=collect_inside_the_lock, daemon=True)
    t.start()
    assert finished.wait(10), "ObjectRef.__del__ blocked on a lock its own thread held"
    wait_until(lambda: store_used() < base + MB, 10, message="the collected ref's object freed")


def test_a_deeply_nested_chain_of_refs_is_released_without_recursion(shared_node):
    """``r = put([r])`` 10,000 times, then drop ``r``: the whole chain is freed at once, with
    no RecursionError in the reference counter (it surfaced in an unrelated later call)."""
    from ember import global_state

    refs = global_state.worker.refs
    before = len(refs)
    r = ember.put(0)
    for _ in range(10_000):
        r = ember.put([r])
    assert len(refs) >= before + 10_001
    inner = ember.get(ember.get(r)[0])[0]  # two levels down, still alive
    del inner
    del r
    gc.collect()
    # Dropped refs are released in batches, on the worker's next calls.
    assert ember.get(ember.put("after")) == "after"
    wait_until(lambda: len(refs) == before, timeout=30, message="the chain to be released")
