"""Ray 0.8's documentation, "Ray Core Walkthrough": the quick-start programs.

Starting Ray, remote functions (tasks), resource requests, multiple returns, objects
(put/get), get with a timeout, wait, and actors. Each program is the document's code with
``import ember as ray`` as the only change; the assertions check what the document says the
program returns or prints.
"""

# The document's programs are kept as written, old spellings included.
# ruff: noqa: UP004

from __future__ import annotations

import time

import ember as ray
import pytest

pytestmark = pytest.mark.timeout(120)

# "you can override this default behavior by passing in specific resources"
WALKTHROUGH_RESOURCES = dict(num_cpus=8, num_gpus=4, resources={"Custom": 2})


def test_starting_ray() -> None:
    """Starting Ray: ``ray.init()`` on a single machine."""
    # Start Ray. If you're connecting to an existing cluster, you would use
    # ray.init(address=<cluster-address>) instead.
    ray.init()

    assert ray.is_initialized()
    # "Ray will then be able to utilize all cores of your machine."
    assert ray.cluster_resources().get("CPU", 0) >= 1


@pytest.mark.ray_init(**WALKTHROUGH_RESOURCES)
def test_remote_functions(ray_start: object) -> None:
    """Remote functions: invocation, return values, parallelism, chaining."""

    # A regular Python function.
    def regular_function():
        return 1

    # A Ray remote function.
    @ray.remote
    def remote_function():
        return 1

    assert regular_function() == 1

    object_id = remote_function.remote()

    # The value of the original `regular_function`
    assert ray.get(object_id) == 1

    # These happen serially.
    for _ in range(4):
        regular_function()

    # These happen in parallel.
    started = time.monotonic()
    refs = []
    for _ in range(4):
        refs.append(remote_function.remote())
    # "the call to remote_function.remote() doesn't block"
    assert time.monotonic() - started < 5
    assert ray.get(refs) == [1, 1, 1, 1]

    @ray.remote
    def remote_chain_function(value):
        return value + 1

    y1_id = remote_function.remote()
    assert ray.get(y1_id) == 1

    chained_id = remote_chain_function.remote(y1_id)
    assert ray.get(chained_id) == 2


@pytest.mark.ray_init(**WALKTHROUGH_RESOURCES)
def test_resource_requirements(ray_start: object) -> None:
    """CPU/GPU, fractional GPU and custom resource requests in the decorator."""

    @ray.remote(num_cpus=4, num_gpus=2)
    def f():
        return 1

    assert ray.get(f.remote()) == 1

    # Ray also supports fractional resource requirements
    @ray.remote(num_gpus=0.5)
    def h():
        return 1

    assert ray.get(h.remote()) == 1

    # Ray support custom resources too.
    @ray.remote(resources={"Custom": 1})
    def f():  # noqa: F811 - the document redefines f
        return 1

    assert ray.get(f.remote()) == 1

    resources = ray.cluster_resources()
    assert resources["CPU"] == 8
    assert resources["GPU"] == 4
    assert resources["Custom"] == 2


@pytest.mark.ray_init()
def test_multiple_returns(ray_start: object) -> None:
    """``num_return_vals=3`` gives three object IDs."""

    @ray.remote(num_return_vals=3)
    def return_multiple():
        return 1, 2, 3

    a_id, b_id, c_id = return_multiple.remote()

    assert ray.get([a_id, b_id, c_id]) == [1, 2, 3]


@pytest.mark.ray_init()
def test_objects_put_get(ray_start: object) -> None:
    """Objects in Ray and Fetching results: put then get."""
    y = 1
    object_id = ray.put(y)
    assert ray.get(object_id) == 1

    y = 1
    obj_id = ray.put(y)
    assert ray.get(obj_id) == 1

    # A list of object IDs gives a list of values, in order.
    assert ray.get([object_id, obj_id]) == [1, 1]


@pytest.mark.ray_init()
def test_get_timeout(ray_start: object, printed) -> None:
    """``ray.get(obj_id, timeout=...)`` raises ``RayTimeoutError``.

    The timeout is shortened from 4 s to 1 s; only its order against the 8 s sleep matters.
    """
    from ember.exceptions import RayTimeoutError

    @ray.remote
    def long_running_function():
        time.sleep(8)

    obj_id = long_running_function.remote()
    started = time.monotonic()
    try:
        ray.get(obj_id, timeout=1)
    except RayTimeoutError:
        print("`get` timed out.")
    elapsed = time.monotonic() - started

    assert printed() == ["`get` timed out."]
    # The get returned at its timeout, not when the task finished.
    assert 0.9 <= elapsed < 7
    # Modern spelling: the same error is a GetTimeoutError and a TimeoutError.
    assert issubclass(RayTimeoutError, TimeoutError)


@pytest.mark.ray_init()
def test_wait(ray_start: object) -> None:
    """``ray.wait(object_ids, num_returns=1, timeout=None)``."""

    @ray.remote
    def sleep_then_return(seconds, value):
        time.sleep(seconds)
        return value

    object_ids = [sleep_then_return.remote(0, "fast"), sleep_then_return.remote(30, "slow")]

    ready_ids, remaining_ids = ray.wait(object_ids, num_returns=1, timeout=None)

    # "it simply waits until that number of objects is ready and returns that exact number"
    assert len(ready_ids) == 1
    assert ready_ids == [object_ids[0]]
    assert remaining_ids == [object_ids[1]]
    assert ray.get(ready_ids[0]) == "fast"

    # With a timeout, wait returns when it runs out, with what is ready by then.
    started = time.monotonic()
    ready_ids, remaining_ids = ray.wait(object_ids, num_returns=2, timeout=0.5)
    assert time.monotonic() - started < 5
    assert ready_ids == [object_ids[0]]
    assert remaining_ids == [object_ids[1]]

    # "Ordering of the input list of object IDs is preserved."
    more = [sleep_then_return.remote(0, i) for i in range(4)]
    ready_ids, remaining_ids = ray.wait(more, num_returns=4)
    assert ready_ids == more
    assert remaining_ids == []


@pytest.mark.ray_init(**WALKTHROUGH_RESOURCES)
def test_actors(ray_start: object, printed) -> None:
    """Remote Classes (Actors): Counter, resource requests, shared state."""

    @ray.remote
    class Counter(object):
        def __init__(self):
            self.value = 0

        def increment(self):
            self.value += 1
            return self.value

    a1 = Counter.remote()
    a2 = Counter.remote()

    @ray.remote(num_cpus=2, num_gpus=0.5)
    class Actor(object):
        pass

    obj_id = a1.increment.remote()
    assert ray.get(obj_id) == 1
    assert ray.get(a2.increment.remote()) == 1

    # Create ten Counter actors.
    counters = [Counter.remote() for _ in range(10)]

    # Increment each Counter once and get the results. These tasks all happen in
    # parallel.
    results = ray.get([c.increment.remote() for c in counters])
    print(results)  # prints [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]

    # Increment the first Counter five times. These tasks are executed serially
    # and share state.
    results = ray.get([counters[0].increment.remote() for _ in range(5)])
    print(results)  # prints [2, 3, 4, 5, 6]

    assert printed() == ["[1, 1, 1, 1, 1, 1, 1, 1, 1, 1]", "[2, 3, 4, 5, 6]"]
