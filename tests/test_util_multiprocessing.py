"""``ember.util.multiprocessing.Pool``: ``multiprocessing.Pool``'s API on actors (Ray's
``ray.util.multiprocessing.Pool``). Every wait has a deadline; every pool is terminated."""

from __future__ import annotations

import gc
import itertools
import os
import time

import ember
import psutil
import pytest
from ember.exceptions import ActorError
from ember.util.multiprocessing import Pool, PoolTaskError, TimeoutError
from ember.util.multiprocessing.results import RemoteTraceback
from ember_test_utils import wait_until


def square(x: int) -> int:
    return x * x


def add(a: int, b: int = 0) -> int:
    return a + b


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"three is bad ({x})")
    return x


def pid(_: object = None) -> int:
    return os.getpid()


def set_marker(value: str) -> None:
    os.environ["POOL_TEST_MARKER"] = value


def read_marker(_: object = None) -> str | None:
    return os.environ.get("POOL_TEST_MARKER")


def returns_an_exception(_: object) -> Exception:
    return KeyError("returned, not raised")


def crash(x: int) -> int:
    if x == 0:
        os._exit(1)
    return x


@pytest.fixture
def pool(shared_node):
    p = Pool(2)
    yield p
    p.terminate()


def test_map_starmap_apply(pool):
    assert pool.map(square, range(10)) == [x * x for x in range(10)]
    assert pool.map(square, (x for x in range(7)), chunksize=3) == [x * x for x in range(7)]
    assert pool.map(square, []) == []
    assert pool.starmap(add, [(1, 2), (3, 4), (5, 6)]) == [3, 7, 11]
    assert pool.apply(add, (1,), {"b": 2}) == 3
    assert pool.apply(add, (1,), kwargs={"b": 5}) == 6  # Ray's name for kwds
    assert pool.apply(pid) != os.getpid()  # the work ran in an actor


def test_map_spreads_over_the_processes(pool):
    assert len(set(pool.map(pid, range(8), chunksize=1))) == 2


def test_async_results(pool):
    r = pool.apply_async(square, (7,))
    assert r.get(timeout=30) == 49
    assert r.ready() and r.successful()
    r = pool.map_async(square, range(4))
    r.wait(30)
    assert r.ready() and r.get(timeout=0) == [0, 1, 4, 9]
    slow = pool.apply_async(time.sleep, (1.5,))
    with pytest.raises(TimeoutError):
        slow.get(timeout=0.1)
    assert not slow.ready()
    with pytest.raises(ValueError, match="not ready"):
        slow.successful()
    slow.wait(0.05)  # returns, no error
    assert slow.get(timeout=30) is None
    assert pool.starmap_async(add, [(1, 1), (2, 2)]).get(timeout=30) == [2, 4]


def test_callbacks(pool):
    got: list = []
    errors: list = []
    pool.map_async(square, range(5), callback=got.append).wait(30)
    assert got == [[0, 1, 4, 9, 16]]
    pool.apply_async(square, (3,), callback=got.append).wait(30)
    assert got[-1] == 9
    r = pool.map_async(fail_on_three, range(6), callback=got.append, error_callback=errors.append)
    r.wait(30)
    assert len(got) == 2  # no success callback when an item raised
    assert [type(e) for e in errors] == [ValueError]
    assert not r.successful()
    # A callback that raises is logged; the pool goes on.
    pool.apply_async(square, (2,), callback=lambda _: 1 / 0).wait(30)
    assert pool.apply(square, (4,)) == 16


def test_errors_surface_at_get(pool):
    with pytest.raises(ValueError, match="three is bad") as info:
        pool.map(fail_on_three, range(6))
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert "fail_on_three" in str(info.value.__cause__)  # the worker's traceback
    with pytest.raises(ValueError):
        pool.apply(fail_on_three, (3,))
    r = pool.starmap_async(fail_on_three, [(1,), (3,)])
    with pytest.raises(ValueError):
        r.get(timeout=30)
    # A function may return an exception object: it is a value, not an error.
    value = pool.apply(returns_an_exception, (0,))
    assert isinstance(value, KeyError)


def test_imap_in_order_and_unordered(pool):
    assert list(pool.imap(square, range(9))) == [x * x for x in range(9)]
    assert list(pool.imap(square, iter(range(9)), chunksize=4)) == [x * x for x in range(9)]
    assert sorted(pool.imap_unordered(square, range(9), chunksize=2)) == [x * x for x in range(9)]
    assert list(pool.imap(square, [])) == []


def test_imap_reads_an_endless_input_lazily(pool):
    it = pool.imap(square, itertools.count())
    assert [next(it) for _ in range(20)] == [x * x for x in range(20)]
    it = pool.imap_unordered(square, itertools.count(), chunksize=3)
    assert len({next(it) for _ in range(10)}) == 10


def test_imap_errors_and_timeouts(pool):
    # Ray's rule, not multiprocessing's: a failed item comes back as a PoolTaskError holding
    # its exception (with the worker's traceback as its cause) and the iteration goes on.
    it = pool.imap(fail_on_three, range(5))
    out = [next(it) for _ in range(5)]
    assert out[:3] == [0, 1, 2] and out[4] == 4
    assert isinstance(out[3], PoolTaskError) and isinstance(out[3].underlying, ValueError)
    assert "fail_on_three" in str(out[3].underlying.__cause__)
    with pytest.raises(StopIteration):
        next(it)
    it = pool.imap(time.sleep, [2])
    with pytest.raises(TimeoutError):
        it.next(timeout=0.1)
    assert it.next(timeout=30) is None

    def broken_input():
        yield 1
        raise OSError("the input broke")

    it = pool.imap(square, broken_input())
    assert next(it) == 1
    with pytest.raises(OSError, match="the input broke"):
        next(it)


def test_initializer_and_initargs(shared_node):
    with Pool(2, initializer=set_marker, initargs=("from the initializer",)) as p:
        assert set(p.map(read_marker, range(4), chunksize=1)) == {"from the initializer"}


def test_initializer_failure_fails_the_constructor(shared_node):
    with pytest.raises(Exception, match="no marker for you"):
        Pool(1, initializer=_raise, initargs=("no marker for you",))


def _raise(message: str) -> None:
    raise RuntimeError(message)


def test_maxtasksperchild_replaces_actors(shared_node):
    p = Pool(1, maxtasksperchild=2)
    try:
        pids = p.map(pid, range(6), chunksize=1)
        assert len(set(pids)) == 3  # two chunks per actor
        assert pids[0] == pids[1] and pids[1] != pids[2]
    finally:
        p.close()
        p.join(timeout=30)
    with pytest.raises(ValueError):
        Pool(1, maxtasksperchild=0)


def test_close_then_join_finishes_the_work(shared_node):
    p = Pool(2)
    pending = p.map_async(time.sleep, [0.3, 0.3, 0.3])
    pids = set(p.map(pid, range(4), chunksize=1))
    with pytest.raises(ValueError, match="still running"):
        p.join()
    p.close()
    with pytest.raises(ValueError, match="not running"):
        p.map(square, [1])
    with pytest.raises(ValueError, match="not running"):
        p.apply_async(square, (1,))
    p.join(timeout=60)
    assert pending.get(timeout=0) == [None, None, None]  # submitted work finished
    wait_until(lambda: not any(psutil.pid_exists(x) for x in pids), timeout=30)


def test_terminate_fails_outstanding_work(shared_node):
    p = Pool(2)
    running = p.map_async(time.sleep, [30, 30], chunksize=1)
    queued = p.map_async(time.sleep, [30] * 6, chunksize=1)
    time.sleep(0.5)
    start = time.monotonic()
    p.terminate()
    with pytest.raises((ActorError, RuntimeError)):
        running.get(timeout=30)
    with pytest.raises((ActorError, RuntimeError)):
        queued.get(timeout=30)
    assert time.monotonic() - start < 20
    p.join(timeout=30)


def test_context_manager_terminates(shared_node):
    with Pool(2) as p:
        pids = set(p.map(pid, range(4), chunksize=1))
    wait_until(lambda: not any(psutil.pid_exists(x) for x in pids), timeout=30)
    with pytest.raises(ValueError):
        p.map(square, [1])


def test_a_dead_actor_is_replaced(shared_node):
    with Pool(1) as p:
        with pytest.raises(ActorError):
            p.map(crash, [0], chunksize=1)
        assert p.map(crash, [1, 2, 3]) == [1, 2, 3]


def test_a_pool_dropped_without_close_lets_its_actors_go(shared_node):
    p = Pool(2)
    pids = set(p.map(pid, range(4), chunksize=1))
    del p
    gc.collect()
    wait_until(lambda: not any(psutil.pid_exists(x) for x in pids), timeout=30)


def test_processes_are_checked(shared_node):
    with pytest.raises(ValueError, match="must be >0"):
        Pool(0)
    with pytest.raises(ValueError, match="only 2 CPUs"):
        Pool(3)


def test_starts_a_local_node_when_none_is_running(ember_start):
    if ember.is_initialized():
        ember.shutdown()
    with Pool(2) as p:
        assert ember.is_initialized()
        assert ember.cluster_resources()["CPU"] == 2
        assert p.map(square, [2, 3]) == [4, 9]


def test_connects_to_a_running_cluster(ember_start, monkeypatch):
    from ember.cluster_utils import Cluster

    if ember.is_initialized():
        ember.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    try:
        # The cluster lives under its own temp root: the driver is given its token.
        monkeypatch.setenv("EMBER_TOKEN", cluster.token.decode())
        with Pool(ray_address=cluster.address) as p:
            assert ember.cluster_resources()["CPU"] == 2
            assert len(set(p.map(pid, range(4), chunksize=1))) == 2
        ember.shutdown()
    finally:
        cluster.shutdown()


def test_arguments_that_cannot_be_pickled_fail_their_result(pool):
    import threading

    r = pool.map_async(square, [1, threading.Lock(), 3], chunksize=1)
    with pytest.raises(Exception, match="(?i)pickle|lock"):
        r.get(timeout=30)
    assert pool.map(square, [1, 2]) == [1, 4]  # the pool goes on
