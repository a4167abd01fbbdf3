"""Ray 0.8's documentation, "Actor Pool": ``ray.util.ActorPool`` over a fixed set of actors.

The first test is the document's program. The rest pin down the pool's API as modern Ray
defines it (``map``/``map_unordered``/``submit``/``get_next``/``get_next_unordered``/
``has_next``/``has_free``/``pop_idle``/``push``), since the document points to the package
reference for those.
"""

# The document's programs are kept as written, old spellings included.
# ruff: noqa: UP004

from __future__ import annotations

import time

import ember as ray
import pytest

pytestmark = [pytest.mark.timeout(120), pytest.mark.ray_init(num_cpus=4)]


def _actor_class():
    @ray.remote
    class Actor(object):
        def double(self, v):
            return 2 * v

        def slow_double(self, v, seconds):
            time.sleep(seconds)
            return 2 * v

        def pair(self, v):
            return v, v + 1

    return Actor


def test_actor_pool_map(ray_start: object, printed) -> None:
    """The document's program, unchanged.

    Its comment shows ``[2, 4, 6, 8]``, but Ray 0.8.5's ``map`` was a generator function, so
    the program printed a generator, and so does it here (``map`` returns a generator in
    every Ray since). As in modern Ray the work is submitted by the ``map`` call itself, so
    the four results are then waiting in the pool, in order.
    """
    from ember.util import ActorPool

    Actor = _actor_class()

    a1, a2 = Actor.remote(), Actor.remote()
    pool = ActorPool([a1, a2])
    print(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4]))
    # [2, 4, 6, 8]

    [line] = printed()
    assert line.startswith("<generator object ActorPool.map"), line
    assert [pool.get_next(timeout=30) for _ in range(4)] == [2, 4, 6, 8]
    assert not pool.has_next()


def test_map_is_ordered_and_eager(ray_start: object) -> None:
    from ember.util import ActorPool

    Actor = _actor_class()
    pool = ActorPool([Actor.remote(), Actor.remote()])
    # The first value is the slowest: map still yields in input order.
    values = [(1, 1.0), (2, 0.0), (3, 0.0), (4, 0.0), (5, 0.0)]
    results = pool.map(lambda a, v: a.slow_double.remote(*v), values)
    # Work is submitted when map() is called, before the generator is consumed.
    assert pool.has_next()
    assert list(results) == [2, 4, 6, 8, 10]
    assert not pool.has_next()


def test_map_unordered(ray_start: object) -> None:
    from ember.util import ActorPool

    Actor = _actor_class()
    pool = ActorPool([Actor.remote(), Actor.remote()])
    values = [(1, 3.0), (2, 0.0), (3, 0.0), (4, 0.0)]
    results = list(pool.map_unordered(lambda a, v: a.slow_double.remote(*v), values))
    assert sorted(results) == [2, 4, 6, 8]
    # The slow first value does not hold back the others.
    assert results[-1] == 2


def test_submit_and_get_next(ray_start: object) -> None:
    from ember.util import ActorPool

    Actor = _actor_class()
    pool = ActorPool([Actor.remote(), Actor.remote()])
    pool.submit(lambda a, v: a.double.remote(v), 1)
    pool.submit(lambda a, v: a.double.remote(v), 2)
    assert pool.has_next()
    assert (pool.get_next(), pool.get_next()) == (2, 4)
    assert not pool.has_next()

    # More submissions than actors: the extra ones queue and still come back in order.
    for i in range(5):
        pool.submit(lambda a, v: a.double.remote(v), i)
    assert [pool.get_next() for _ in range(5)] == [0, 2, 4, 6, 8]


def test_get_next_unordered(ray_start: object) -> None:
    from ember.util import ActorPool

    Actor = _actor_class()
    pool = ActorPool([Actor.remote() for _ in range(4)])
    for i in range(5):
        pool.submit(lambda a, v: a.double.remote(v), i)
    total = []
    while pool.has_next():
        total.append(pool.get_next_unordered())
    assert sorted(total) == [0, 2, 4, 6, 8]


def test_no_more_results(ray_start: object) -> None:
    from ember.util import ActorPool

    Actor = _actor_class()
    pool = ActorPool([Actor.remote()])
    with pytest.raises(StopIteration, match="No more results to get"):
        pool.get_next()
    with pytest.raises(StopIteration, match="No more results to get"):
        pool.get_next_unordered()


def test_get_next_timeout(ray_start: object) -> None:
    from ember.util import ActorPool

    Actor = _actor_class()
    pool = ActorPool([Actor.remote(), Actor.remote()])
    pool.submit(lambda a, v: a.slow_double.remote(v, 60), 1)
    with pytest.raises(TimeoutError):
        pool.get_next(timeout=0.1)
    # Without ignore_if_timedout the result stays pending.
    assert pool.has_next()
    with pytest.raises(TimeoutError):
        pool.get_next(timeout=0.1, ignore_if_timedout=True)
    # With it, the late result is dropped.
    assert not pool.has_next()


def test_get_next_unordered_timeout(ray_start: object) -> None:
    from ember.util import ActorPool

    Actor = _actor_class()
    pool = ActorPool([Actor.remote(), Actor.remote()])
    pool.submit(lambda a, v: a.slow_double.remote(v, 60), 1)
    with pytest.raises(TimeoutError):
        pool.get_next_unordered(timeout=0.1)
    assert pool.has_next()


def test_multiple_returns(ray_start: object) -> None:
    """``fn`` may return a list of object refs; the result is the list of values."""
    from ember.util import ActorPool

    @ray.remote
    class Foo(object):
        @ray.method(num_return_vals=2)
        def bar(self):
            return 1, 2

    pool = ActorPool([Foo.remote() for _ in range(2)])
    for _ in range(4):
        pool.submit(lambda a, v: list(a.bar.remote()), None)
    while pool.has_next():
        assert pool.get_next(timeout=None) == [1, 2]


def test_has_free_and_pop_idle(ray_start: object) -> None:
    """An actor with a pending result is busy: it is not free and cannot be popped."""
    from ember.util import ActorPool

    Actor = _actor_class()
    a1 = Actor.remote()
    pool = ActorPool([a1])
    pool.submit(lambda a, v: a.double.remote(v), 1)
    assert pool.pop_idle() is None
    assert pool.has_free() is False  # actor is busy
    assert pool.get_next() == 2
    assert pool.has_free()
    assert pool.pop_idle() == a1  # removes actor from pool
    assert pool.has_free() is False  # no more actors in pool
    assert pool.pop_idle() is None


def test_push(ray_start: object) -> None:
    from ember.util import ActorPool

    Actor = _actor_class()
    a1, a2, a3 = Actor.remote(), Actor.remote(), Actor.remote()
    pool = ActorPool([a1])

    pool.submit(lambda a, v: a.double.remote(v), 1)
    assert pool.has_free() is False  # actor is busy
    with pytest.raises(ValueError, match="already belongs"):
        pool.push(a1)
    pool.push(a2)
    assert pool.has_free()  # a2 is available

    pool.submit(lambda a, v: a.double.remote(v), 2)
    pool.submit(lambda a, v: a.double.remote(v), 3)
    assert pool.has_free() is False  # one submission is waiting for an actor
    pool.push(a3)
    assert pool.has_free() is False  # a3 took the waiting submission at once
    assert [pool.get_next() for _ in range(3)] == [2, 4, 6]
    assert pool.has_free()


def test_get_next_after_get_next_unordered(ray_start: object) -> None:
    from ember.util import ActorPool

    Actor = _actor_class()
    pool = ActorPool([Actor.remote(), Actor.remote()])
    pool.submit(lambda a, v: a.slow_double.remote(v, 3), 1)
    pool.submit(lambda a, v: a.double.remote(v), 2)
    assert pool.get_next_unordered() == 4
    with pytest.raises(ValueError):
        pool.get_next()
