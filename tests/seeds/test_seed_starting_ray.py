"""Ray 0.8's documentation, "Starting Ray": init, shutdown, is_initialized, local mode.

Connecting to a cluster (``ray.init(address="auto")`` after ``ray start``) runs against a
two-node cluster started by the test.
"""

# The document's programs are kept as written, old spellings included.
# ruff: noqa: UP004

from __future__ import annotations

import ember as ray
import pytest

pytestmark = pytest.mark.timeout(120)


def test_init_then_remote_function() -> None:
    """Starting Ray on a single machine: init must come before any ``.remote()``."""
    ray.init()

    @ray.remote
    def f():
        return 1

    assert ray.get(f.remote()) == 1


def test_init_shutdown() -> None:
    """To stop or restart Ray, use ``ray.shutdown()``."""
    ray.init()
    ...  # ray program
    ray.shutdown()

    # "restart": a second init after a shutdown works, and tasks run again.
    ray.init()

    @ray.remote
    def f():
        return 2

    assert ray.get(f.remote()) == 2
    ray.shutdown()


def test_is_initialized() -> None:
    """To check if Ray is initialized, you can call ``ray.is_initialized()``."""
    ray.init()
    assert ray.is_initialized() == True  # noqa: E712 - the document's own spelling

    ray.shutdown()
    assert ray.is_initialized() == False  # noqa: E712


def test_init_cluster_address(monkeypatch) -> None:
    """Using Ray on a cluster: ``ray.init(address="auto")`` after ``ray start --head`` (here a
    two-node cluster of ``ember.cluster_utils``, found through its temp dir)."""
    from ember.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        monkeypatch.setenv("EMBER_TMPDIR", cluster.head_node.temp_dir)
        ray.init(address="auto")
        assert len(ray.nodes()) == 2
        assert ray.cluster_resources()["CPU"] == 2
        ray.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_local_mode() -> None:
    """Turning off parallelism: ``ray.init(local_mode=True)`` runs everything in one process."""
    import os

    ray.init(local_mode=True)

    @ray.remote
    def where():
        return os.getpid()

    @ray.remote
    class Counter(object):
        def __init__(self):
            self.value = 0

        def increment(self):
            self.value += 1
            return self.value

    # "force all Ray functions to occur on a single process"
    assert ray.get(where.remote()) == os.getpid()
    c = Counter.remote()
    assert ray.get([c.increment.remote() for _ in range(3)]) == [1, 2, 3]
