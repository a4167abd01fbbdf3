"""Generator tasks as in Ray 2.x (issue 17): streaming generators (``num_returns="streaming"``
and a generator function's default) in tasks and in sync, threaded and async actors, their
errors, retries, cancel, wait and freeing; ``num_returns="dynamic"``; a generator with a
static ``num_returns``; and the option checks. The facts come from Ray's generator docs and
``python/ray/tests/test_streaming_generator*.py``."""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import pickle
import subprocess
import sys
import time

import ember
import numpy as np
import pytest
from ember.core_worker.generator_streams import item_id
from ember.exceptions import ActorDiedError, TaskCancelledError, WorkerCrashedError
from ember_test_utils import wait_until

pytestmark = pytest.mark.timeout(120)


def _wait_for_file(path: str, deadline: float = 30.0) -> None:
    """Inside a task: holds it until the test says go (or fails it after the deadline)."""
    end = time.monotonic() + deadline
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.02)


@ember.remote
def count_to(n: int):
    yield from range(n)


@ember.remote
def fail_at(n: int):
    yield from range(n)
    raise ValueError(f"failed after {n}")


@ember.remote
def gated(path: str):
    yield "first"
    _wait_for_file(path)
    yield "second"


def test_generator_function_streams_by_default(shared_node):
    gen = count_to.remote(4)
    assert isinstance(gen, ember.ObjectRefGenerator)
    assert [ember.get(ref) for ref in gen] == [0, 1, 2, 3]
    with pytest.raises(StopIteration):
        next(gen)
    assert ember.get(gen.completed(), timeout=30) is None
    assert gen.is_finished() and not gen.next_ready()
    explicit = count_to.options(num_returns="streaming").remote(2)
    assert [ember.get(next(explicit)), ember.get(next(explicit))] == [0, 1]
    with pytest.raises(StopIteration):
        next(explicit)


def test_an_item_is_readable_while_the_task_still_runs(shared_node, tmp_path):
    go = str(tmp_path / "go")
    gen = gated.remote(go)
    assert ember.get(next(gen), timeout=30) == "first"
    # The task is still waiting for the file: nothing of its end is known yet.
    assert ember.wait([gen.completed()], timeout=0)[0] == []
    assert not gen.is_finished()
    assert ember.wait([gen], timeout=0.2) == ([], [gen])
    open(go, "w").close()
    ready, _ = ember.wait([gen], timeout=30)
    assert ready == [gen] and gen.next_ready()
    assert ember.get(next(gen)) == "second"
    with pytest.raises(StopIteration):
        next(gen)


def test_an_exception_is_the_item_after_the_last_yielded(shared_node):
    gen = fail_at.remote(2)
    assert ember.get(next(gen)) == 0
    assert ember.get(next(gen)) == 1
    bad = next(gen)
    with pytest.raises(ValueError, match="failed after 2"):
        ember.get(bad)
    for _ in range(3):
        with pytest.raises(StopIteration):
            next(gen)
    assert ember.get(gen.completed()) is None  # as Ray: only a task that died holds an error
    assert gen.is_finished()


def test_an_exception_before_any_item(shared_node):
    refs = list(fail_at.remote(0))
    assert len(refs) == 1
    with pytest.raises(ValueError):
        ember.get(refs[0])


def test_async_iteration(shared_node):
    async def consume() -> list:
        gen = count_to.remote(3)
        first = await gen.__anext__()
        out = [await first]
        async for ref in gen:
            out.append(await ref)
        with pytest.raises(StopAsyncIteration):
            await gen.__anext__()
        return out

    assert asyncio.run(consume()) == [0, 1, 2]


def test_async_generator_function_as_a_task(shared_node):
    @ember.remote
    async def ticks(n: int):
        for i in range(n):
            await asyncio.sleep(0.01)
            yield i * 10

    assert [ember.get(r) for r in ticks.remote(3)] == [0, 10, 20]


@ember.remote
class Streamer:
    def __init__(self) -> None:
        self.calls = 0

    def numbers(self, n: int):
        self.calls += 1
        yield from range(n)

    def fail(self):
        yield "ok"
        raise KeyError("in the method")

    def slow(self, n: int):
        for i in range(n):
            time.sleep(0.3)
            yield i

    def pid(self) -> int:
        return os.getpid()


@ember.remote
class AsyncStreamer:
    async def numbers(self, n: int):
        for i in range(n):
            await asyncio.sleep(0.01)
            yield i

    def plain(self, n: int):
        for i in range(n):
            yield -i

    async def fail(self):
        yield "ok"
        raise KeyError("in the async method")


def test_actor_methods_stream(shared_node):
    actor = Streamer.remote()
    gen = actor.numbers.remote(3)
    assert isinstance(gen, ember.ObjectRefGenerator)
    assert [ember.get(r) for r in gen] == [0, 1, 2]
    refs = list(actor.fail.remote())
    assert ember.get(refs[0]) == "ok"
    with pytest.raises(KeyError):
        ember.get(refs[1])
    assert len(refs) == 2
    # The same method with other returns, as Ray allows.
    assert ember.get(actor.numbers.options(num_returns=2).remote(2)) == [0, 1]
    dynamic = ember.get(actor.numbers.options(num_returns="dynamic").remote(2))
    assert [ember.get(r) for r in dynamic] == [0, 1]

    threaded = Streamer.options(max_concurrency=2).remote()
    assert [ember.get(r) for r in threaded.numbers.remote(3)] == [0, 1, 2]


def test_async_actor_methods_stream(shared_node):
    actor = AsyncStreamer.remote()
    assert [ember.get(r) for r in actor.numbers.remote(3)] == [0, 1, 2]
    assert [ember.get(r) for r in actor.plain.remote(2)] == [0, -1]
    refs = list(actor.fail.remote())
    assert ember.get(refs[0]) == "ok"
    with pytest.raises(KeyError):
        ember.get(refs[1])

    async def consume() -> list:
        return [await ref async for ref in actor.numbers.remote(2)]

    assert asyncio.run(consume()) == [0, 1]


def test_dynamic_returns_one_ref_of_refs(shared_node):
    ref = count_to.options(num_returns="dynamic").remote(3)
    assert isinstance(ref, ember.ObjectRef)
    refs = ember.get(ref)
    assert isinstance(refs, ember.DynamicObjectRefGenerator)
    assert len(refs) == 3
    assert [ember.get(r) for r in refs] == [0, 1, 2]
    # An exception is the last item, as Ray's dynamic generators have it.
    items = list(ember.get(fail_at.options(num_returns="dynamic").remote(1)))
    assert ember.get(items[0]) == 0
    with pytest.raises(ValueError):
        ember.get(items[1])


def test_static_num_returns(shared_node):
    @ember.remote(num_returns=3)
    def three():
        yield from ("a", "b", "c")

    assert ember.get(list(three.remote())) == ["a", "b", "c"]
    one = count_to.options(num_returns=1).remote(1)
    assert ember.get(one) == 0
    with pytest.raises(ValueError, match=r"Task returned 2 objects, but num_returns=3"):
        ember.get(count_to.options(num_returns=3).remote(2)[0])
    with pytest.raises(ValueError, match=r"more than num_returns=2"):
        ember.get(count_to.options(num_returns=2).remote(5)[0])


def test_options_accept_generator_returns_only_for_generators(shared_node):
    def plain():
        return 1

    for mode in ("streaming", "dynamic"):
        with pytest.raises(ValueError, match="generator function"):
            ember.remote(num_returns=mode)(plain)
        with pytest.raises(ValueError, match="generator function"):
            ember.remote(plain).options(num_returns=mode)
    with pytest.raises(ValueError, match="num_returns"):
        count_to.options(num_returns="stream")
    with pytest.raises(ValueError, match="num_returns"):
        ember.remote(num_returns=-1)(plain)
    with pytest.raises(TypeError, match="num_returns"):
        ember.remote(num_returns=1.5)(plain)

    @ember.remote
    class Plain:
        def value(self):
            return 1

    actor = Plain.remote()
    with pytest.raises(ValueError, match="generator function"):
        actor.value.options(num_returns="streaming")
    with pytest.raises(ValueError, match="generator function"):

        @ember.remote
        class Bad:
            @ember.method(num_returns="streaming")
            def value(self):
                return 1

    # The integer rules are unchanged, and num_returns=None is the generator's default.
    assert ember.get(actor.value.options(num_returns=1).remote()) == 1
    assert isinstance(count_to.options(num_returns=None).remote(1), ember.ObjectRefGenerator)


def test_wait_mixes_generators_and_refs(shared_node, tmp_path):
    go = str(tmp_path / "go")
    gen = gated.remote(go)
    next(gen)  # the first item: the next one waits for the file
    done = ember.put("done")
    ready, not_ready = ember.wait([gen, done], num_returns=1, timeout=10)
    assert ready == [done] and not_ready == [gen]
    open(go, "w").close()
    ready, not_ready = ember.wait([gen, done], num_returns=2, timeout=30)
    assert ready == [gen, done] and not_ready == []
    assert ember.get(next(gen)) == "second"
    # A generator at its end is ready too: next() answers at once (StopIteration).
    ready, _ = ember.wait([gen], timeout=30)
    assert ready == [gen]
    with pytest.raises(StopIteration):
        next(gen)


def test_timeouts_of_the_private_next(shared_node, tmp_path):
    go = str(tmp_path / "go")
    gen = gated.remote(go)
    assert ember.get(gen._next_sync(timeout_s=30)) == "first"
    assert gen._next_sync(timeout_s=0.1).is_nil()

    async def later() -> bool:
        return (await gen._next_async(timeout_s=0.1)).is_nil()

    assert asyncio.run(later())
    open(go, "w").close()
    assert ember.get(gen._next_sync(timeout_s=30)) == "second"


def test_dropping_the_generator_frees_its_items(shared_node):
    @ember.remote
    def big(n: int):
        for i in range(n):
            yield np.full(200_000, i, dtype=np.int64)  # 1.6 MB each: shared memory

    worker = ember.global_state.worker
    gen = big.remote(4)
    kept = next(gen)
    ember.get(gen.completed(), timeout=30)  # every item has arrived
    task_id = gen.completed().task_id()
    ids = [item_id(task_id, i) for i in range(4)]
    assert all(worker.refs.has(oid) for oid in ids)
    del gen
    gc.collect()
    wait_until(lambda: not any(worker.refs.has(oid) for oid in ids[1:]), 10, message="frees")
    # The item handed out is an ordinary ref and lives on.
    assert worker.refs.has(ids[0])
    assert int(ember.get(kept)[0]) == 0
    del kept
    wait_until(lambda: not worker.refs.has(ids[0]), 10, message="the kept item freed")


def test_a_crash_mid_generator_surfaces_at_the_next_item(shared_node):
    @ember.remote(max_retries=0)
    def crash():
        yield 0
        yield 1
        os._exit(1)

    gen = crash.remote()
    assert [ember.get(next(gen)), ember.get(next(gen))] == [0, 1]
    ref = next(gen)
    assert ref == gen.completed()
    with pytest.raises(WorkerCrashedError):
        ember.get(ref)
    with pytest.raises(StopIteration):
        next(gen)
    assert gen.is_finished()


def test_a_retried_generator_does_not_repeat_delivered_items(shared_node, tmp_path):
    marker = str(tmp_path / "crashed")

    @ember.remote(max_retries=2)
    def crash_once(marker: str):
        for i in range(4):
            yield (i, os.getpid())
            if i == 1 and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(1)

    items = [ember.get(r) for r in crash_once.remote(marker)]
    assert [i for i, _ in items] == [0, 1, 2, 3]
    assert items[1][1] != items[2][1]  # the last two came from the second attempt


def test_retry_exceptions_restart_the_stream_without_repeats(shared_node, tmp_path):
    marker = str(tmp_path / "raised")

    @ember.remote(retry_exceptions=[ValueError], max_retries=3)
    def flaky(marker: str):
        for i in range(5):
            if i == 3 and not os.path.exists(marker):
                open(marker, "w").close()
                raise ValueError("once")
            yield i

    assert [ember.get(r) for r in flaky.remote(marker)] == [0, 1, 2, 3, 4]


def test_an_actor_killed_mid_generator(shared_node):
    actor = Streamer.remote()
    gen = actor.slow.remote(20)
    assert ember.get(next(gen), timeout=30) == 0
    ember.kill(actor)
    rest = []
    with pytest.raises(ActorDiedError):
        for ref in gen:
            rest.append(ember.get(ref))
    assert rest == list(range(1, len(rest) + 1))
    with pytest.raises(StopIteration):
        next(gen)


def test_cancel_a_generator(shared_node):
    @ember.remote
    def forever():
        for i in itertools.count():
            yield i
            time.sleep(0.1)

    gen = forever.remote()
    assert ember.get(next(gen), timeout=30) == 0
    ember.cancel(gen)
    with pytest.raises(TaskCancelledError):
        for ref in gen:
            ember.get(ref)
    with pytest.raises(StopIteration):
        next(gen)


def test_large_items_and_a_consumer_task(shared_node):
    @ember.remote
    def arrays(n: int):
        for i in range(n):
            yield np.full(100_000, i, dtype=np.int64)

    @ember.remote
    def total(n: int) -> int:
        # This task owns the stream it reads (its worker is the caller).
        return sum(int(ember.get(ref).sum()) for ref in arrays.remote(n))

    assert [int(ember.get(r)[-1]) for r in arrays.remote(3)] == [0, 1, 2]
    assert ember.get(total.remote(3), timeout=60) == 100_000 * 3


def test_a_generator_is_not_a_value(shared_node):
    gen = count_to.remote(1)
    with pytest.raises(ValueError, match="iterate it"):
        ember.get(gen)
    with pytest.raises(TypeError, match="ObjectRefGenerator"):
        pickle.dumps(gen)
    with pytest.raises(NotImplementedError):
        gen.send(None)
    assert [ember.get(r) for r in gen] == [0]


def test_local_mode_runs_generators(tmp_path):
    script = tmp_path / "local.py"
    script.write_text(
        "import ember\n"
        "ember.init(local_mode=True)\n"
        "@ember.remote\n"
        "def gen(n):\n"
        "    yield from range(n)\n"
        "    raise ValueError('end')\n"
        "g = gen.remote(2)\n"
        "out = [ember.get(next(g)), ember.get(next(g))]\n"
        "try:\n"
        "    ember.get(next(g))\n"
        "except ValueError:\n"
        "    out.append('raised')\n"
        "out.append(sum(1 for _ in g))\n"
        "d = ember.get(gen.options(num_returns='dynamic').remote(1))\n"
        "out.append(len(d))\n"
        "@ember.remote(num_returns=2)\n"
        "def two():\n"
        "    yield 'a'\n"
        "    yield 'b'\n"
        "out.append(ember.get(two.remote()))\n"
        "print(out)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[0, 1, 'raised', 0, 2, ['a', 'b']]"
