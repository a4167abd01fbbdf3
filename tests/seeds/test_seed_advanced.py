"""Ray 0.8's documentation, "Advanced Usage".

Dynamic return counts with ``.options(num_return_vals=...)``, dynamic custom resources
(``ray.experimental.set_resource``), nested remote functions, inspecting cluster state
(``ray.nodes``, ``ray.cluster_resources``, ``ray.available_resources``) and named/detached
actors. The GPU programs of this section are in test_gpus_resources.py; the Cython one needs
a compiled extension and is not included.
"""

# The document's programs are kept as written, old spellings included.
# ruff: noqa: UP004

from __future__ import annotations

import time

import ember as ray
import pytest

pytestmark = pytest.mark.timeout(120)


def _counter_class():
    # The Counter of "Passing Around Actor Handles", which the detached-actor
    # program reads with get_counter.
    @ray.remote
    class Counter(object):
        def __init__(self):
            self.counter = 0

        def inc(self):
            self.counter += 1

        def get_counter(self):
            return self.counter

    return Counter


@pytest.mark.ray_init()
def test_dynamic_num_return_vals(ray_start: object) -> None:
    """Vary the number of return values for tasks (and actor methods too)."""

    @ray.remote
    def f(n):
        return list(range(n))

    id1, id2 = f.options(num_return_vals=2).remote(2)
    assert ray.get(id1) == 0
    assert ray.get(id2) == 1

    @ray.remote
    class Actor(object):
        def f(self, n):
            return list(range(n))

    a = Actor.remote()
    id1, id2, id3 = a.f.options(num_return_vals=3).remote(3)
    assert ray.get([id1, id2, id3]) == [0, 1, 2]


def test_dynamic_custom_resources() -> None:
    """Dynamic Custom Resources: a task creates a resource with ``set_resource``."""
    ray.init()
    resource_name = "test_resource"
    resource_capacity = 1.0

    @ray.remote
    def set_resource(resource_name, resource_capacity):
        ray.experimental.set_resource(resource_name, resource_capacity)

    ray.get(set_resource.remote(resource_name, resource_capacity))

    available_resources = ray.available_resources()
    cluster_resources = ray.cluster_resources()

    assert available_resources[resource_name] == resource_capacity
    assert cluster_resources[resource_name] == resource_capacity


@pytest.mark.ray_init()
def test_nested_remote_functions(ray_start: object) -> None:
    """Nested Remote Functions: ``g`` returns object IDs, ``h`` returns their values."""

    @ray.remote
    def f():
        return 1

    @ray.remote
    def g():
        # Call f 4 times and return the resulting object IDs.
        return [f.remote() for _ in range(4)]

    @ray.remote
    def h():
        # Call f 4 times, block until those 4 tasks finish,
        # retrieve the results, and return the values.
        return ray.get([f.remote() for _ in range(4)])

    # >>> ray.get(g.remote())
    # [ObjectID(b1457ba0911ae84989aae86f89409e953dd9a80e), ...]
    ids = ray.get(g.remote())
    assert len(ids) == 4
    assert all(isinstance(i, ray.ObjectID) for i in ids)
    assert all(repr(i).startswith("ObjectID(") or repr(i).startswith("ObjectRef(") for i in ids)
    # IDs made inside a task stay usable by the driver that received them.
    assert ray.get(ids) == [1, 1, 1, 1]

    # >>> ray.get(h.remote())
    # [1, 1, 1, 1]
    assert ray.get(h.remote()) == [1, 1, 1, 1]


def test_nodes() -> None:
    """Node Information: ``ray.nodes()`` lists the one local node, alive, with resources."""
    ray.init()

    print(ray.nodes())

    nodes = ray.nodes()
    assert len(nodes) == 1
    node = nodes[0]
    # The document's keys that modern Ray still has ("ClientID" is "NodeID" there).
    assert "ClientID" in node or "NodeID" in node
    assert node["alive"] is True
    assert isinstance(node["NodeManagerAddress"], str) and node["NodeManagerAddress"]
    assert isinstance(node["NodeManagerPort"], int)
    assert node["Resources"]["CPU"] >= 1


@pytest.mark.ray_init(num_cpus=2, resources={"Custom": 3})
def test_cluster_and_available_resources(ray_start: object, wait_for) -> None:
    """Resource Information: totals, and what is idle right now."""
    total = ray.cluster_resources()
    assert total["CPU"] == 2
    assert total["Custom"] == 3

    @ray.remote(num_cpus=1, resources={"Custom": 2})
    def hold():
        time.sleep(30)

    hold.remote()
    # "this will return idle (available) resources rather than total resources"
    wait_for(
        lambda: (
            ray.available_resources().get("Custom") == 1
            and ray.available_resources().get("CPU") == 1
        ),
        what="the running task's resources to show as taken",
    )
    assert ray.cluster_resources()["Custom"] == 3


@pytest.mark.ray_init()
def test_detached_actor(ray_start: object) -> None:
    """Detached Actors: a named detached actor is found by name with ``get_actor``."""
    Counter = _counter_class()

    counter = Counter.options(name="CounterActor", detached=True).remote()
    ray.get(counter.inc.remote())

    counter = ray.util.get_actor("CounterActor")
    print(ray.get(counter.get_counter.remote()))

    assert ray.get(counter.get_counter.remote()) == 1
    # The modern top-level spelling finds the same actor.
    assert ray.get(ray.get_actor("CounterActor").get_counter.remote()) == 1
    ray.kill(counter)


# The two drivers of the document, run as separate processes against a cluster started with
# `ember start --head` (the seed's `ray start --head`): the first makes the detached actor and
# exits, the second finds it by name. Only the import line differs from the document.
_FIRST_DRIVER = """
import ember as ray

ray.init(address="auto")


@ray.remote
class Counter(object):
    def __init__(self):
        self.counter = 0

    def inc(self):
        self.counter += 1

    def get_counter(self):
        return self.counter


counter = Counter.options(name="CounterActor", detached=True).remote()
ray.get(counter.inc.remote())
"""

_SECOND_DRIVER = """
import ember as ray

ray.init(address="auto")
counter = ray.util.get_actor("CounterActor")
print(ray.get(counter.get_counter.remote()))
"""


def test_detached_actor_outlives_driver() -> None:
    """ "The CounterActor will be kept alive even after the driver running above script
    exits. Therefore it is possible to run the following script in a different driver"."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from ember_test_utils import head_cluster

    repo = Path(__file__).resolve().parents[2]  # run drivers outside /tmp (see the README)
    with head_cluster("--include-dashboard", "false", prefix="emb-seed-") as (root, _, _):
        env = {**os.environ, "EMBER_TMPDIR": root}

        def driver(code: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                timeout=90,
                env=env,
                cwd=repo,
            )

        first = driver(_FIRST_DRIVER)
        assert first.returncode == 0, first.stderr
        second = driver(_SECOND_DRIVER)
        assert second.returncode == 0, second.stderr
        assert second.stdout.strip().splitlines()[-1] == "1"
        # The name is cluster-wide among drivers that name no namespace; a driver that names
        # one has its own names, as in modern Ray.
        again = _FIRST_DRIVER.replace("ray.get(counter.inc.remote())", "")
        taken = driver(again)
        assert taken.returncode != 0 and "cluster-wide name" in taken.stderr, taken.stderr
        own = again.replace('ray.init(address="auto")', 'ray.init(address="auto", namespace="x")')
        assert driver(own).returncode == 0


@pytest.mark.ray_init()
def test_named_actor(ray_start: object) -> None:
    """ "Note that just creating a named actor is allowed": found by name while it lives. Ray
    2.x (followed here) counts a named actor's handles as any other's: it lives while its
    creator holds one (a handle from get_actor does not count), so the creator keeps it."""
    Counter = _counter_class()

    creator = Counter.options(name="CounterActor").remote()  # noqa: F841 - keeps it alive

    counter = ray.util.get_actor("CounterActor")
    assert ray.get(counter.get_counter.remote()) == 0


@pytest.mark.ray_init()
def test_detached_actor_without_name_is_not_allowed(ray_start: object) -> None:
    """ "creating a detached actor without name is not allowed because there will be no way
    to retrieve the actor handle and the resource is leaked"."""
    Counter = _counter_class()

    # Can't do this!
    with pytest.raises(ValueError):
        Counter.options(detached=True).remote()
