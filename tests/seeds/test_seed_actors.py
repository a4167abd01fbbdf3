"""Ray 0.8's documentation, "Using Actors".

Creating an actor (decorator and ``ray.remote(Counter)``), ``ray.method(num_return_vals=2)``,
resources with actors (GPUs, custom resources, ``.options``), terminating actors (handle out of
scope, ``ray.actor.exit_actor()``, ``ray.kill``) and actor handles passed to tasks. The Actor
Pool program of this section is in test_actor_pool.py.
"""

# The document's programs are kept as written, old spellings included.
# ruff: noqa: UP004

from __future__ import annotations

import os
import time

import ember as ray
import pytest
from ember_test_utils import process_gone

pytestmark = pytest.mark.timeout(120)


@pytest.mark.ray_init()
def test_creating_an_actor(ray_start: object) -> None:
    """Creating an actor: the decorator, and the equivalent ``ray.remote(Counter)``."""

    @ray.remote
    class Counter(object):
        def __init__(self):
            self.value = 0

        def increment(self):
            self.value += 1
            return self.value

    c = Counter.remote()
    assert ray.get([c.increment.remote() for _ in range(3)]) == [1, 2, 3]

    class Counter(object):  # noqa: F811 - the document's second form
        def __init__(self):
            self.value = 0

        def increment(self):
            self.value += 1
            return self.value

    Counter = ray.remote(Counter)

    c = Counter.remote()
    assert ray.get([c.increment.remote() for _ in range(3)]) == [1, 2, 3]

    # "A worker process is created on that node for the purpose of running methods called
    # on the actor": methods run in a process other than the driver.
    @ray.remote
    class Where(object):
        def pid(self):
            return os.getpid()

    assert ray.get(Where.remote().pid.remote()) != os.getpid()


@pytest.mark.ray_init()
def test_actor_method_num_return_vals(ray_start: object) -> None:
    """Actor Methods: ``@ray.method(num_return_vals=2)`` returns two object IDs."""

    @ray.remote
    class Foo(object):
        @ray.method(num_return_vals=2)
        def bar(self):
            return 1, 2

    f = Foo.remote()

    obj_id1, obj_id2 = f.bar.remote()
    assert ray.get(obj_id1) == 1
    assert ray.get(obj_id2) == 2


@pytest.mark.ray_init(num_cpus=4, num_gpus=2, resources={"Resource2": 1})
def test_resources_with_actors(ray_start: object) -> None:
    """Resources with Actors: a GPU actor sees its GPUs in ``ray.get_gpu_ids()``.

    The document's GPUActor classes have no methods; ``gpu_ids`` is added to observe them.
    """

    @ray.remote(num_cpus=2, num_gpus=1)
    class GPUActor(object):
        def gpu_ids(self):
            return ray.get_gpu_ids()

    gpu_actor = GPUActor.remote()
    ids = ray.get(gpu_actor.gpu_ids.remote())
    # "This is a list of integers, like [], or [1], or [2, 5, 6]."
    assert isinstance(ids, list) and len(ids) == 1
    assert ids[0] in (0, 1)

    @ray.remote(resources={"Resource2": 1})
    class GPUActor(object):  # noqa: F811 - the document reuses the name
        def ping(self):
            return "pong"

    assert ray.get(GPUActor.remote().ping.remote()) == "pong"


@pytest.mark.ray_init(num_cpus=6, resources={"Custom1": 1, "Custom2": 1, "Custom3": 1})
def test_actor_options_resources(ray_start: object) -> None:
    """Many copies of one actor class with varying resource requirements (``.options``).

    "Ray will need to be started with sufficient CPU resources and the relevant custom
    resources": 1 + 2 + 3 CPUs and one of each custom resource.
    """

    @ray.remote(num_cpus=4)
    class Counter(object):
        def __init__(self):
            self.value = 0

        def increment(self):
            self.value += 1
            return self.value

    a1 = Counter.options(num_cpus=1, resources={"Custom1": 1}).remote()
    a2 = Counter.options(num_cpus=2, resources={"Custom2": 1}).remote()
    a3 = Counter.options(num_cpus=3, resources={"Custom3": 1}).remote()

    assert ray.get([a.increment.remote() for a in (a1, a2, a3)]) == [1, 1, 1]


@pytest.mark.ray_init()
def test_actor_terminated_when_handle_out_of_scope(ray_start: object, wait_for) -> None:
    """Terminating Actors: the process ends when the original handle is destructed."""

    @ray.remote
    class Counter(object):
        def __init__(self):
            self.value = 0

        def increment(self):
            self.value += 1
            return self.value

        def pid(self):
            return os.getpid()

    actor_handle = Counter.remote()
    pid = ray.get(actor_handle.pid.remote())
    assert not process_gone(pid)

    del actor_handle
    wait_for(lambda: process_gone(pid), what=f"actor process {pid} to exit")


@pytest.mark.ray_init()
def test_exit_actor(ray_start: object, wait_for) -> None:
    """``ray.actor.exit_actor()`` from a method: earlier calls finish first, then the
    exit's object ID (and every later call) raises ``RayActorError``."""

    @ray.remote
    class Counter(object):
        def __init__(self):
            self.value = 0

        def increment(self):
            time.sleep(0.2)
            self.value += 1
            return self.value

        def pid(self):
            return os.getpid()

        def exit(self):
            ray.actor.exit_actor()

    actor = Counter.remote()
    pid = ray.get(actor.pid.remote())
    earlier = [actor.increment.remote() for _ in range(3)]
    exit_id = actor.exit.remote()

    # "this method of termination will wait until any previously submitted tasks finish"
    assert ray.get(earlier) == [1, 2, 3]
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(exit_id)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.increment.remote())
    # "This will kill the actor process and release resources"
    wait_for(lambda: process_gone(pid), what=f"actor process {pid} to exit")


@pytest.mark.ray_init()
def test_kill_fails_pending_tasks(ray_start: object, wait_for) -> None:
    """``ray.kill(actor_handle)``: the actor exits at once and pending tasks fail."""

    @ray.remote
    class Sleeper(object):
        def pid(self):
            return os.getpid()

        def sleep(self, seconds):
            time.sleep(seconds)
            return seconds

    actor_handle = Sleeper.remote()
    pid = ray.get(actor_handle.pid.remote())
    running = actor_handle.sleep.remote(60)
    queued = actor_handle.sleep.remote(60)

    started = time.monotonic()
    ray.kill(actor_handle)
    ready, _ = ray.wait([running, queued], num_returns=2, timeout=20)
    assert len(ready) == 2, "killed actor's tasks did not fail promptly"
    for ref in (running, queued):
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(ref)
    assert time.monotonic() - started < 20
    wait_for(lambda: process_gone(pid), what=f"actor process {pid} to exit")


@pytest.mark.ray_init()
def test_exit_handlers_run_on_terminate_not_on_kill(ray_start: object, tmp_path, wait_for) -> None:
    """The seed (Ray 0.8) says ``ray.kill`` runs the actor's atexit handlers; Ray 2.x changed
    that ("atexit handlers installed in the actor will not be run"), and Ember follows Ray
    2.x, whose programs it runs: ``ray.kill`` is immediate, and the exit that runs them is
    ``__ray_terminate__`` (or ``exit_actor`` in a method)."""
    marker = tmp_path / "atexit-ran"

    @ray.remote
    class WithExitHandler(object):
        def __init__(self, path):
            import atexit

            atexit.register(lambda: open(path, "w").close())

        def ready(self):
            return True

        def pid(self):
            import os

            return os.getpid()

    killed = WithExitHandler.remote(str(marker))
    assert ray.get(killed.ready.remote())
    pid = ray.get(killed.pid.remote())
    ray.kill(killed)
    wait_for(lambda: process_gone(pid), what=f"killed actor process {pid} to exit")
    assert not marker.exists()
    ended = WithExitHandler.remote(str(marker))
    assert ray.get(ended.ready.remote())
    ended.__ray_terminate__.remote()
    wait_for(marker.exists, what="the actor's atexit handler to run")


@pytest.mark.ray_init(num_cpus=4)
def test_passing_actor_handles(ray_start: object, printed, wait_for) -> None:
    """Passing Around Actor Handles: tasks call ``counter.inc.remote()`` on a shared actor.

    The document's program as written: its ten one-second polls take about 10 s.
    """

    @ray.remote
    class Counter(object):
        def __init__(self):
            self.counter = 0

        def inc(self):
            self.counter += 1

        def get_counter(self):
            return self.counter

    @ray.remote
    def f(counter):
        for _ in range(1000):
            time.sleep(0.1)
            counter.inc.remote()

    counter = Counter.remote()

    # Start some tasks that use the actor.
    [f.remote(counter) for _ in range(3)]

    # Print the counter value.
    for _ in range(10):
        time.sleep(1)
        print(ray.get(counter.get_counter.remote()))

    counts = [int(line) for line in printed()]
    assert len(counts) == 10
    # The count only grows: every task increments the one shared actor.
    assert counts == sorted(counts)
    # The tasks do reach the actor through the handle they were passed.
    wait_for(lambda: ray.get(counter.get_counter.remote()) >= 10, what="increments")
    # The three tasks run at once: 30 more increments take well under the 3 s that one
    # task (ten increments a second) would need.
    seen = ray.get(counter.get_counter.remote())
    started = time.monotonic()
    wait_for(
        lambda: ray.get(counter.get_counter.remote()) >= seen + 30,
        what="increments from the three tasks",
    )
    assert time.monotonic() - started < 2.9
