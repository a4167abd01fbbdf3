"""Actors, with Ray's semantics: ordered calls, method options, handles passed around,
threaded and async actors, named actors and namespaces, actor end (handles out of scope,
``kill``, ``exit_actor``), restarts and retries, constructor failures, resources, many actors
at once and ``ActorPool``.

Every test runs real processes; state is polled with deadlines (``wait_until``), never slept on.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import time

import ember
import pytest
from ember.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
from ember_test_utils import process_gone, wait_until

pytestmark = pytest.mark.timeout(90)


# -- helpers -----------------------------------------------------------------------------------
def call_until_ok(method, *args, timeout: float = 30.0, **kwargs):
    """Calls ``method.remote(...)`` until a call succeeds (an actor may be restarting: Ray lets
    calls that reach a dying worker fail with an actor error); returns that call's value."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            return ember.get(
                method.remote(*args, **kwargs), timeout=max(1.0, deadline - time.monotonic())
            )
        except RayActorError as e:
            last = e
            time.sleep(0.05)
    pytest.fail(f"no call succeeded within {timeout} s; last error: {last!r}")


def wait_for_actor_error(method, timeout: float = 30.0) -> BaseException:
    """Calls until a call fails with an actor error; returns the error."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ember.get(method.remote(), timeout=max(1.0, deadline - time.monotonic()))
        except RayActorError as e:
            return e
        time.sleep(0.05)
    pytest.fail(f"calls still succeed {timeout} s later")


@ember.remote
class Counter:
    def __init__(self, start: int = 0) -> None:
        self.value = start
        self.log: list = []

    def incr(self, by: int = 1) -> int:
        self.value += by
        return self.value

    def get(self) -> int:
        return self.value

    def record(self, item):
        self.log.append(item)
        return len(self.log)

    def get_log(self) -> list:
        return self.log

    def pid(self) -> int:
        return os.getpid()

    def state(self):
        return os.getpid(), self.value


# -- calls -------------------------------------------------------------------------------------
def test_calls_from_one_caller_run_in_order_and_state_persists(shared_node):
    c = Counter.remote()
    refs = [c.record.remote(i) for i in range(200)]
    assert ember.get(refs) == list(range(1, 201))
    assert ember.get(c.get_log.remote()) == list(range(200))
    assert ember.get([c.incr.remote() for _ in range(5)]) == [1, 2, 3, 4, 5]
    assert ember.get(c.get.remote()) == 5


def test_order_kept_when_an_earlier_call_waits_for_an_argument(shared_node):
    @ember.remote
    def slow(x):
        time.sleep(1.0)
        return x

    c = Counter.remote()
    ember.get(c.get.remote())  # constructed
    first = c.record.remote(slow.remote("first"))
    second = c.record.remote("second")
    assert ember.get([first, second]) == [1, 2]
    assert ember.get(c.get_log.remote()) == ["first", "second"]


def test_order_kept_when_direct_and_queued_calls_interleave(shared_node):
    # Calls whose argument is not ready go through the I/O thread's queue; the ones after
    # them must not overtake them by the direct path, and vice versa.
    @ember.remote
    def later(x):
        time.sleep(0.05)
        return x

    c = Counter.remote()
    ember.get(c.get.remote())
    refs = [c.record.remote(later.remote(i) if i % 7 == 3 else i) for i in range(100)]
    assert ember.get(refs) == list(range(1, 101))
    assert ember.get(c.get_log.remote()) == list(range(100))


def test_calls_from_many_driver_threads_all_answered(shared_node):
    c = Counter.remote()
    ember.get(c.get.remote())
    errors: list[BaseException] = []

    def caller() -> None:
        try:
            for _ in range(200):
                ember.get(c.incr.remote(), timeout=30)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert ember.get(c.get.remote()) == 800


def test_method_num_returns_decorator_and_options(shared_node):
    @ember.remote
    class Multi:
        @ember.method(num_returns=2)
        def two(self):
            return "a", "b"

        def many(self, n):
            return tuple(range(n))

    m = Multi.remote()
    a, b = m.two.remote()
    assert isinstance(a, ember.ObjectRef) and isinstance(b, ember.ObjectRef)
    assert ember.get([a, b]) == ["a", "b"]
    refs = m.many.options(num_returns=3).remote(3)
    assert isinstance(refs, list) and len(refs) == 3
    assert ember.get(refs) == [0, 1, 2]
    # .options overrides the decorator's default, for this call only.
    one = m.two.options(num_returns=1).remote()
    assert isinstance(one, ember.ObjectRef)
    assert ember.get(one) == ("a", "b")
    assert ember.get(m.many.remote(2)) == (0, 1)


def test_keyword_args_and_defaults(shared_node):
    @ember.remote
    class KW:
        def __init__(self, a, b=10, *, c=100):
            self.base = a + b + c

        def f(self, x, y=1, *args, z=2, **kw):
            return (self.base, x, y, args, z, kw)

    k = KW.remote(1, c=1000)
    assert ember.get(k.f.remote(5)) == (1011, 5, 1, (), 2, {})
    assert ember.get(k.f.remote(5, 6, 7, 8, z=9, extra="e")) == (
        1011,
        5,
        6,
        (7, 8),
        9,
        {"extra": "e"},
    )
    assert ember.get(k.f.remote(x=3, y=4)) == (1011, 3, 4, (), 2, {})


def test_objectref_args_resolved(shared_node):
    @ember.remote
    def make(v):
        return v

    @ember.remote
    class Echo:
        def __init__(self, initial):
            self.initial = initial

        def kinds(self, a, b, *, c, nested):
            return (
                self.initial,
                a,
                b,
                c,
                isinstance(nested[0], ember.ObjectRef),
                ember.get(nested[0]),
            )

    init_ref = ember.put({"init": 1})
    e = Echo.remote(init_ref)
    big = ember.put(list(range(50_000)))  # large: goes through shared memory
    out = ember.get(
        e.kinds.remote(ember.put(7), make.remote("task"), c=make.remote(3), nested=[big])
    )
    assert out[:4] == ({"init": 1}, 7, "task", 3)
    assert out[4] is True
    assert out[5] == list(range(50_000))


def test_direct_calls_raise_type_error(shared_node):
    with pytest.raises(TypeError, match=r"\.remote\(\)"):
        Counter()
    c = Counter.remote()
    with pytest.raises(TypeError, match=r"\.remote\(\)"):
        c.incr()
    with pytest.raises(AttributeError):
        _ = c.no_such_method
    assert ember.get(c.incr.remote()) == 1


# -- options -----------------------------------------------------------------------------------
# (options, the words the error must contain: the option, the value given, what is allowed)
BAD_ACTOR_OPTIONS = [
    ({"num_cpus": -1}, ["'num_cpus'", "-1", "non-negative number"]),
    ({"num_gpus": -1}, ["'num_gpus'", "-1", "non-negative number"]),
    ({"memory": -10}, ["'memory'", "-10", "non-negative"]),
    ({"max_restarts": -2}, ["'max_restarts'", "-2", "integer >= -1"]),
    ({"max_reconstructions": -3}, ["'max_restarts'", "-3", "integer >= -1"]),
    ({"max_task_retries": -2}, ["'max_task_retries'", "-2", "integer >= -1"]),
    ({"max_pending_calls": -2}, ["'max_pending_calls'", "-2", "integer >= -1"]),
    ({"max_concurrency": 0}, ["'max_concurrency'", "0", "integer >= 1"]),
    ({"max_concurrency": -4}, ["'max_concurrency'", "-4", "integer >= 1"]),
    ({"max_concurrency": 2.5}, ["'max_concurrency'", "2.5", "float", "integer >= 1"]),
    ({"max_restarts": "forever"}, ["'max_restarts'", "'forever'", "str", "integer >= -1"]),
    ({"name": 42}, ["'name'", "42", "int", "a string"]),
    ({"namespace": b"ns"}, ["'namespace'", "b'ns'", "bytes", "a string"]),
    ({"lifetime": "forever"}, ["'lifetime'", "'forever'", "'detached'"]),
    ({"lifetime": True}, ["'lifetime'", "True", "bool", "'detached'"]),
    ({"detached": "yes"}, ["'detached'", "'yes'", "True or False"]),
    ({"get_if_exists": True}, ["get_if_exists", "name"]),
    ({"resources": {"CPU": 1}}, ["num_cpus"]),
    ({"max_retries": 1}, ["Invalid option 'max_retries'", "max_restarts"]),
]

BAD_METHOD_OPTIONS = [
    ({"num_returns": -1}, ["'num_returns'", "-1", "integer >= 0"]),
    ({"num_return_vals": -1}, ["'num_returns'", "-1", "integer >= 0"]),
    # A string is a value error now: "streaming" and "dynamic" are allowed (generators).
    ({"num_returns": "2"}, ["'num_returns'", "'2'", "integer >= 0", "'streaming'"]),
    ({"max_task_retries": -2}, ["'max_task_retries'", "-2", "integer >= -1"]),
    ({"name": 1.0}, ["'name'", "1.0", "float", "a string"]),
    ({"concurrency_group": 3}, ["'concurrency_group'", "3", "a string"]),
    ({"num_cpus": 1}, ["Invalid option 'num_cpus'", "num_returns"]),
]


def _assert_words(info, words):
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("opts,words", BAD_ACTOR_OPTIONS)
def test_bad_actor_options_fail_at_decoration(opts, words):
    with pytest.raises(ValueError) as info:

        @ember.remote(**opts)
        class Bad:
            def f(self):
                return 1

    _assert_words(info, words)


@pytest.mark.parametrize("opts,words", BAD_ACTOR_OPTIONS)
def test_bad_actor_options_fail_in_dot_options(opts, words):
    with pytest.raises(ValueError) as info:
        Counter.options(**opts)
    _assert_words(info, words)


@pytest.mark.parametrize("opts,words", BAD_METHOD_OPTIONS)
def test_bad_method_options_fail_in_ember_method(opts, words):
    with pytest.raises(ValueError) as info:
        ember.method(**opts)
    _assert_words(info, words)


def test_bad_method_options_fail_in_method_dot_options(shared_node):
    c = Counter.remote()
    for opts, words in BAD_METHOD_OPTIONS:
        with pytest.raises(ValueError) as info:
            c.incr.options(**opts)
        _assert_words(info, words)
    # Nothing bad reached the actor: it still answers.
    assert ember.get(c.incr.remote(), timeout=30) == 1
    ember.kill(c)


def test_good_actor_options_are_accepted(shared_node):
    # Ray's -1 means "forever" / "unlimited" for these counts.
    opts = {"max_restarts": -1, "max_task_retries": -1, "max_pending_calls": -1}
    c = Counter.options(**opts, max_concurrency=2, lifetime=None).remote(3)
    assert ember.get(c.incr.options(max_task_retries=-1, num_returns=1).remote(), timeout=30) == 4
    ember.kill(c)


# -- handles -----------------------------------------------------------------------------------
def test_handle_passed_to_task(shared_node):
    @ember.remote
    def bump(counter, n):
        return ember.get([counter.incr.remote() for _ in range(n)])[-1]

    c = Counter.remote()
    assert ember.get(bump.remote(c, 5)) == 5
    assert ember.get([bump.remote(c, 1), bump.remote(c, 1)]) in ([6, 7], [7, 6])
    assert ember.get(c.get.remote()) == 7


def test_handle_passed_to_actor_and_back(shared_node):
    @ember.remote
    class User:
        def __init__(self, counter):
            self.counter = counter

        def use(self, n):
            return ember.get([self.counter.incr.remote() for _ in range(n)])[-1]

        def use_other(self, other):
            return ember.get(other.incr.remote(100))

        def give_back(self):
            return self.counter

        def give_back_list(self):
            return [self.counter]

    c = Counter.remote()
    u = User.remote(c)
    assert ember.get(u.use.remote(3)) == 3
    assert ember.get(u.use_other.remote(c)) == 103
    back = ember.get(u.give_back.remote())
    assert isinstance(back, ember.ActorHandle)
    assert back == c and hash(back) == hash(c)
    assert ember.get(back.incr.remote()) == 104
    [back2] = ember.get(u.give_back_list.remote())
    assert ember.get(back2.get.remote()) == 104
    assert ember.get(c.get.remote()) == 104


def test_handle_equality_and_hash(shared_node):
    @ember.remote
    def identity(h):
        return h

    a = Counter.remote()
    b = Counter.remote()
    a2 = ember.get(identity.remote(a))
    assert a == a2 and hash(a) == hash(a2)
    assert a != b
    assert len({a, a2, b}) == 2
    assert {a: 1}[a2] == 1


# -- threaded and async actors -----------------------------------------------------------------
def test_threaded_actor_runs_calls_concurrently(shared_node):
    @ember.remote(max_concurrency=4)
    class Threaded:
        def slow(self):
            start = time.time()
            time.sleep(1.0)
            return start, time.time(), threading.get_ident()

    t = Threaded.remote()
    spans = ember.get([t.slow.remote() for _ in range(4)])
    starts = [s for s, _, _ in spans]
    ends = [e for _, e, _ in spans]
    # All four overlap: each started before any finished.
    assert max(starts) < min(ends), spans
    assert len({tid for _, _, tid in spans}) == 4


def test_plain_actor_runs_calls_one_at_a_time(shared_node):
    @ember.remote
    class Plain:
        def slow(self):
            start = time.time()
            time.sleep(0.2)
            return start, time.time()

    p = Plain.remote()
    spans = sorted(ember.get([p.slow.remote() for _ in range(4)]))
    for (_, end), (next_start, _) in zip(spans, spans[1:], strict=False):
        assert next_start >= end - 0.001, spans


def test_async_actor_runs_coroutines_concurrently_on_one_loop(shared_node):
    @ember.remote
    class AsyncActor:
        async def nap(self):
            start = time.time()
            await asyncio.sleep(0.5)
            return start, time.time(), id(asyncio.get_running_loop()), threading.get_ident()

    a = AsyncActor.remote()
    t0 = time.monotonic()
    out = ember.get([a.nap.remote() for _ in range(20)])
    elapsed = time.monotonic() - t0
    assert elapsed < 5.0, f"20 x 0.5 s coroutines took {elapsed:.1f} s: not concurrent"
    starts = [o[0] for o in out]
    ends = [o[1] for o in out]
    assert max(starts) < min(ends), "the coroutines did not overlap"
    assert len({o[2] for o in out}) == 1 and len({o[3] for o in out}) == 1


def test_async_actor_awaits_refs(shared_node):
    @ember.remote
    def slow_value(v, delay=0.5):
        time.sleep(delay)
        return v

    @ember.remote
    class Awaiter:
        async def await_passed(self, refs):
            return await refs[0]

        async def await_own(self, v):
            return await slow_value.remote(v)

        async def gather(self, n):
            return await asyncio.gather(*[slow_value.remote(i, 0.2) for i in range(n)])

    a = Awaiter.remote()
    ref = slow_value.remote("from-driver")
    assert ember.get(a.await_passed.remote([ref])) == "from-driver"
    assert ember.get(a.await_own.remote("own")) == "own"
    assert ember.get(a.gather.remote(4)) == [0, 1, 2, 3]


def test_ref_future_and_asyncio_in_driver(shared_node):
    @ember.remote
    def slow_value(v, delay=0.3):
        time.sleep(delay)
        return v

    assert slow_value.remote(5).future().result(timeout=30) == 5

    c = Counter.remote()

    async def main():
        v = await slow_value.remote("awaited")
        w = await c.incr.remote(2)
        refs = [slow_value.remote(i) for i in range(3)]
        # Python >= 3.11's asyncio.wait takes futures/tasks only (Ray's refs too need wrapping).
        futs = [asyncio.ensure_future(refs[0]), refs[1].as_future(), refs[2].as_future()]
        done, pending = await asyncio.wait(futs, timeout=30)
        assert not pending
        wrapped = await asyncio.wait_for(asyncio.wrap_future(slow_value.remote(9).future()), 30)
        return v, w, sorted(d.result() for d in done), wrapped

    assert asyncio.run(main()) == ("awaited", 2, [0, 1, 2], 9)


# -- named actors ------------------------------------------------------------------------------
def test_named_actor_found_in_driver(shared_node):
    c = Counter.options(name="named-counter").remote()
    assert ember.get(c.incr.remote()) == 1
    found = ember.get_actor("named-counter")
    assert found == c
    assert ember.get(found.incr.remote()) == 2
    assert ember.get(c.get.remote()) == 2
    with pytest.raises(ValueError):
        ember.get_actor("no-such-actor")
    ember.kill(c)


def test_named_actor_found_inside_task_and_actor(shared_node):
    # Tasks and actors run in their job's namespace (Ray), so they see the driver's names.
    c = Counter.options(name="named-for-workers").remote()
    ember.get(c.get.remote())

    @ember.remote
    def use_by_name():
        return ember.get(ember.get_actor("named-for-workers").incr.remote(10))

    @ember.remote
    class Finder:
        def use(self):
            return ember.get(ember.get_actor("named-for-workers").incr.remote(100))

    assert ember.get(use_by_name.remote(), timeout=30) == 10
    finder = Finder.remote()
    assert ember.get(finder.use.remote(), timeout=30) == 110
    ember.kill(c)


def test_named_actor_created_inside_task_found_by_driver(shared_node):
    @ember.remote
    def create():
        h = Counter.options(name="made-in-task", lifetime="detached").remote(42)
        return ember.get(h.get.remote())

    assert ember.get(create.remote(), timeout=30) == 42
    h = ember.get_actor("made-in-task")  # in the driver's namespace, as in Ray
    assert ember.get(h.get.remote()) == 42
    ember.kill(h)


def test_namespaces(shared_node):
    a = Counter.options(name="same-name", namespace="ns-one").remote(1)
    b = Counter.options(name="same-name", namespace="ns-two").remote(2)
    assert ember.get([a.get.remote(), b.get.remote()]) == [1, 2]
    one = ember.get_actor("same-name", namespace="ns-one")
    two = ember.get_actor("same-name", namespace="ns-two")
    assert one == a and two == b
    assert ember.get([one.get.remote(), two.get.remote()]) == [1, 2]
    with pytest.raises(ValueError):
        ember.get_actor("same-name")  # not in the driver's namespace
    ember.kill(a)
    ember.kill(b)


def test_taken_name_raises_value_error_and_get_if_exists(shared_node):
    c = Counter.options(name="taken").remote(5)
    with pytest.raises(ValueError, match="taken"):
        Counter.options(name="taken").remote()
    same = Counter.options(name="taken", get_if_exists=True).remote(99)
    assert same == c
    assert ember.get(same.incr.remote()) == 6  # the existing one: not constructed with 99
    ember.kill(c)
    # Once dead, the name is free again.
    wait_until(lambda: _name_free("taken"), 10, message="the name to be released")
    d = Counter.options(name="taken").remote(1)
    assert ember.get(d.get.remote()) == 1
    ember.kill(d)


def _name_free(name: str) -> bool:
    try:
        ember.get_actor(name)
        return False
    except ValueError:
        return True


def test_detached_lifetime_accepted(shared_node):
    a = Counter.options(name="detached-a", lifetime="detached").remote(1)
    b = Counter.options(name="detached-b", detached=True).remote(2)  # the seed's spelling
    assert ember.get([a.get.remote(), b.get.remote()]) == [1, 2]
    assert ember.get(ember.get_actor("detached-a").get.remote()) == 1
    assert ember.get(ember.get_actor("detached-b").get.remote()) == 2
    ember.kill(a)
    ember.kill(b)


def test_detached_actor_outlives_its_handles(shared_node):
    a = Counter.options(name="detached-c", lifetime="detached").remote(3)
    pid = ember.get(a.pid.remote())
    del a
    gc.collect()
    # Still reachable by name after the handle is gone (it only ends by kill or with the node).
    h = ember.get_actor("detached-c")
    assert ember.get(h.get.remote()) == 3
    assert not process_gone(pid)
    ember.kill(h)
    wait_until(lambda: process_gone(pid), 15, message=f"detached actor pid {pid} to exit")


# -- actor end ---------------------------------------------------------------------------------
def test_actor_exits_when_last_handle_is_deleted(shared_node):
    c = Counter.remote()
    pid = ember.get(c.pid.remote())
    assert not process_gone(pid)
    del c
    gc.collect()
    wait_until(lambda: process_gone(pid), 15, message=f"actor pid {pid} to exit")


def test_actor_held_by_another_actor_stays_alive(shared_node):
    @ember.remote
    class Holder:
        def __init__(self, h):
            self.h = h

        def call(self):
            return ember.get(self.h.incr.remote())

        def pid(self):
            return os.getpid()

    c = Counter.remote()
    pid = ember.get(c.pid.remote())
    holder = Holder.remote(c)
    holder_pid = ember.get(holder.pid.remote())
    del c
    gc.collect()
    # The holder's borrowed handle keeps it alive.
    for i in range(1, 4):
        assert ember.get(holder.call.remote()) == i
    assert not process_gone(pid)
    del holder
    gc.collect()
    wait_until(lambda: process_gone(holder_pid), 15, message="the holder to exit")
    wait_until(lambda: process_gone(pid), 15, message="the held actor to exit")


def test_calls_queued_before_the_last_handle_is_deleted_still_run(shared_node):
    @ember.remote
    class Slow:
        def pid(self):
            return os.getpid()

        def slow(self, v):
            time.sleep(0.3)
            return v

    s = Slow.remote()
    pid = ember.get(s.pid.remote())
    refs = [s.slow.remote(i) for i in range(3)]
    del s
    gc.collect()
    # Ray ends an out-of-scope actor only after the calls already submitted to it.
    assert ember.get(refs, timeout=30) == [0, 1, 2]
    wait_until(lambda: process_gone(pid), 15, message="the actor to exit after its calls")


def test_call_on_a_temporary_handle(shared_node):
    # A common Ray idiom: the handle is garbage right after .remote(), the call still runs.
    assert ember.get(Counter.remote(7).get.remote(), timeout=30) == 7
    assert ember.get([Counter.remote(i).incr.remote() for i in range(3)], timeout=30) == [1, 2, 3]


def test_kill_then_calls_raise_actor_died(shared_node):
    c = Counter.remote()
    pid = ember.get(c.pid.remote())
    ember.kill(c)
    with pytest.raises(ActorDiedError) as info:
        ember.get(c.incr.remote(), timeout=30)
    assert isinstance(info.value, RayActorError)
    assert "The actor is dead because it was killed by `ember.kill`" in str(info.value)
    wait_until(lambda: process_gone(pid), 15, message="the killed actor's process to exit")
    ember.kill(c)  # killing a dead actor is not an error
    with pytest.raises(RayActorError):
        ember.get(c.get.remote(), timeout=30)


def test_call_running_when_killed_fails(shared_node, tmp_path):
    marker = tmp_path / "started"

    @ember.remote
    class Sleeper:
        def long(self, path):
            open(path, "w").close()
            time.sleep(60)
            return "finished"

    s = Sleeper.remote()
    ref = s.long.remote(str(marker))
    wait_until(marker.exists, 30, message="the call to start")
    t0 = time.monotonic()
    ember.kill(s)
    with pytest.raises(ActorDiedError) as info:
        ember.get(ref, timeout=30)
    assert time.monotonic() - t0 < 20
    assert "it was killed by `ember.kill`" in str(info.value)


def test_exit_actor(shared_node):
    @ember.remote
    class Quitter:
        def pid(self):
            return os.getpid()

        def quit(self):
            ember.actor.exit_actor()

    q = Quitter.remote()
    pid = ember.get(q.pid.remote())
    with pytest.raises(RayActorError) as info:
        ember.get(q.quit.remote(), timeout=30)  # as in Ray: the exiting call raises too
    assert "exit_actor() was called" in str(info.value)
    wait_until(lambda: process_gone(pid), 15, message="the actor's process to exit")
    with pytest.raises(ActorDiedError) as info:
        ember.get(q.pid.remote(), timeout=30)
    assert "exit_actor() was called" in str(info.value)
    assert "ember.kill()" not in str(info.value)
    ember.kill(q)  # already dead: no error


def test_exit_actor_in_async_actor(shared_node):
    @ember.remote
    class AsyncQuitter:
        async def pid(self):
            return os.getpid()

        async def quit(self):
            ember.actor.exit_actor()

    q = AsyncQuitter.remote()
    pid = ember.get(q.pid.remote())
    with pytest.raises(RayActorError) as info:
        ember.get(q.quit.remote(), timeout=30)
    assert "exit_actor() was called" in str(info.value)
    wait_until(lambda: process_gone(pid), 15, message="the async actor's process to exit")
    with pytest.raises(ActorDiedError) as info:
        ember.get(q.pid.remote(), timeout=30)
    assert "exit_actor() was called" in str(info.value)


def test_exit_actor_outside_an_actor_raises(shared_node):
    with pytest.raises(TypeError):
        ember.actor.exit_actor()


# -- restarts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("option", ["max_restarts", "max_reconstructions"])
def test_restart_after_sigkill_then_dead(shared_node, option):
    c = Counter.options(**{option: 1}).remote()
    pid = ember.get(c.pid.remote())
    assert ember.get([c.incr.remote() for _ in range(3)])[-1] == 3
    os.kill(pid, signal.SIGKILL)
    # Comes back in a new process, constructor re-run: the state starts over.
    new_pid, value = call_until_ok(c.state)
    while new_pid == pid:  # a reply that raced the kill
        new_pid, value = call_until_ok(c.state)
    assert new_pid != pid
    assert value == 0
    assert ember.get([c.incr.remote() for _ in range(3)]) == [1, 2, 3]
    # A second crash is past max_restarts: the actor is dead and says why.
    os.kill(new_pid, signal.SIGKILL)
    err = wait_for_actor_error(c.get)
    deadline = time.monotonic() + 30
    while "not retried" in str(err) and time.monotonic() < deadline:
        err = wait_for_actor_error(c.get)  # a call lost in flight; later ones see the death
    assert isinstance(err, ActorDiedError), repr(err)
    assert "SIGKILL" in str(err) or "signal" in str(err), str(err)
    with pytest.raises(ActorDiedError):
        ember.get(c.get.remote(), timeout=30)
    wait_until(lambda: process_gone(new_pid), 10)


def test_kill_with_no_restart_false_restarts(shared_node):
    c = Counter.options(max_restarts=1).remote()
    pid = ember.get(c.pid.remote())
    ember.get(c.incr.remote(5))
    ember.kill(c, no_restart=False)
    new_pid, value = call_until_ok(c.state)
    while new_pid == pid:
        new_pid, value = call_until_ok(c.state)
    assert value == 0
    ember.kill(c)  # no_restart=True (the default): dead for good
    with pytest.raises(ActorDiedError):
        ember.get(c.get.remote(), timeout=30)
    wait_until(lambda: process_gone(new_pid), 15)


def test_max_task_retries_retries_the_call_in_flight(shared_node, tmp_path):
    @ember.remote(max_restarts=1, max_task_retries=1)
    class Worky:
        def pid(self):
            return os.getpid()

        def work(self, path):
            with open(path, "a") as f:
                f.write(f"{os.getpid()}\n")
            if len(open(path).read().split()) == 1:
                time.sleep(30)  # the first attempt: killed by the test long before this ends
            return os.getpid()

    w = Worky.remote()
    pid = ember.get(w.pid.remote())
    marker = tmp_path / "attempts"
    ref = w.work.remote(str(marker))
    wait_until(marker.exists, 30, message="the call to start")
    os.kill(pid, signal.SIGKILL)
    result = ember.get(ref, timeout=60)
    assert result != pid
    assert marker.read_text().split() == [str(pid), str(result)]


def test_a_call_lost_to_a_restart_says_the_actor_restarts_not_that_it_is_dead(
    shared_node, tmp_path
):
    @ember.remote(max_restarts=1)
    class Restartable:
        def pid(self):
            return os.getpid()

        def work(self, path):
            open(path, "w").close()
            time.sleep(30)

    a = Restartable.remote()
    pid = ember.get(a.pid.remote())
    marker = tmp_path / "started"
    ref = a.work.remote(str(marker))
    wait_until(marker.exists, 30, message="the call to start")
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ActorUnavailableError) as lost:  # Ray's class for it, not ActorDiedError
        ember.get(ref, timeout=60)
    text = str(lost.value)
    assert "is restarting" in text and "is dead" not in text, text
    assert "max_task_retries" in text
    new_pid = call_until_ok(a.pid)
    assert new_pid != pid  # and the actor is indeed back


def test_max_task_retries_minus_one_retries_calls_for_every_restart(shared_node, tmp_path):
    @ember.remote(max_restarts=-1, max_task_retries=-1)
    class Phoenix:
        def pid(self):
            return os.getpid()

        def work(self, path):
            with open(path, "a") as f:
                f.write(f"{os.getpid()}\n")
            if len(open(path).read().split()) < 3:
                time.sleep(30)  # attempts 1 and 2: killed by the test long before this ends
            return os.getpid()

    p = Phoenix.remote()
    marker = tmp_path / "attempts"
    ref = p.work.remote(str(marker))
    for attempt in range(1, 3):  # two deaths under the same call
        wait_until(
            lambda n=attempt: marker.exists() and len(marker.read_text().split()) == n,
            30,
            message=f"attempt {attempt} to start",
        )
        os.kill(int(marker.read_text().split()[-1]), signal.SIGKILL)
    result = ember.get(ref, timeout=60)
    pids = [int(x) for x in marker.read_text().split()]
    assert len(pids) == 3 and result == pids[-1] and len(set(pids)) == 3


def test_constructor_error_makes_calls_raise_actor_died(shared_node):
    @ember.remote
    class Broken:
        def __init__(self):
            raise ValueError("constructor exploded 4242")

        def f(self):
            return 1

    b = Broken.remote()
    with pytest.raises(ActorDiedError, match="constructor exploded 4242"):
        ember.get(b.f.remote(), timeout=30)
    with pytest.raises(ActorDiedError, match="constructor exploded 4242"):
        ember.get(b.f.remote(), timeout=30)


# -- ActorPool ---------------------------------------------------------------------------------
def test_actor_pool_map(shared_node):
    if ember.util.ActorPool is None:
        pytest.skip("ember.util.ActorPool is not available (core/util/actor_pool.py missing)")

    @ember.remote
    class Doubler:
        def double(self, v):
            return 2 * v

    pool = ember.util.ActorPool([Doubler.remote(), Doubler.remote()])
    assert list(pool.map(lambda a, v: a.double.remote(v), range(10))) == [2 * v for v in range(10)]
    assert sorted(pool.map_unordered(lambda a, v: a.double.remote(v), range(6))) == [
        0,
        2,
        4,
        6,
        8,
        10,
    ]


# -- own nodes: resources and many actors (last, as they replace the shared node) --------------
def test_gpu_actor_sees_its_gpu_and_second_waits(ember_start):
    ember_start(num_cpus=2, num_gpus=1)

    @ember.remote(num_gpus=1)
    class GpuActor:
        def gpus(self):
            return ember.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")

    first = GpuActor.remote()
    ids, visible = ember.get(first.gpus.remote(), timeout=30)
    assert ids == [0]
    assert visible == "0"
    second = GpuActor.remote()
    ref = second.gpus.remote()
    ready, not_ready = ember.wait([ref], timeout=1)
    assert ready == [] and not_ready == [ref], "the second GPU actor ran without a free GPU"
    ember.kill(first)
    ids2, _ = ember.get(ref, timeout=30)
    assert ids2 == [0]


def test_fifty_actors_on_two_cpus(ember_start):
    ember_start(num_cpus=2)

    @ember.remote
    class P:
        def pid(self):
            return os.getpid()

    t0 = time.monotonic()
    actors = [P.remote() for _ in range(50)]
    pids = ember.get([a.pid.remote() for a in actors], timeout=90)
    assert len(set(pids)) == 50
    assert os.getpid() not in pids
    assert time.monotonic() - t0 < 90
    del actors
    gc.collect()
    wait_until(lambda: all(process_gone(p) for p in pids), 30, message="the 50 actors to exit")


def test_max_pending_calls_limits_calls_in_flight_and_frees_as_they_finish(shared_node):
    @ember.remote
    class Gate:
        def __init__(self):
            self.open = False

        def release(self):
            self.open = True

        def wait_open(self):
            while not self.open:
                time.sleep(0.01)
            return "done"

    gate = Gate.options(max_concurrency=4, max_pending_calls=2, name="pending-gate").remote()
    first = gate.wait_open.remote()
    gate.wait_open.remote()  # fire and forget: its ref is dropped, it still counts
    with pytest.raises(ember.exceptions.PendingCallsLimitExceeded, match="max_pending_calls=2"):
        gate.wait_open.remote()
    # A handle found by name carries the actor's limit too.
    with pytest.raises(ember.exceptions.PendingCallsLimitExceeded):
        ember.get_actor("pending-gate").release.remote()

    # The count is per process, as in Ray: a task's own handle has room and opens the gate.
    @ember.remote
    def open_gate():
        return ember.get(ember.get_actor("pending-gate").release.remote(), timeout=30)

    ember.get(open_gate.remote(), timeout=30)
    assert ember.get(first, timeout=30) == "done"

    def room_again():
        try:
            return ember.get(gate.wait_open.remote(), timeout=30) == "done"
        except ember.exceptions.PendingCallsLimitExceeded:
            return False

    wait_until(room_again, timeout=30, message="the dropped call to finish and free its slot")
    ember.kill(gate)
