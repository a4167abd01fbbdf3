"""Objects live as long as their owner (issue 19, item 1): a driver that exits, shuts down,
crashes or is SIGKILLed leaves nothing in any node's store, and whoever still borrows its
objects gets OwnerDiedError.

Each driver is a process of its own (``owner_driver.py``) on a real two-node cluster,
leaving large puts and task results on both nodes (primary copies and copies pulled by the
other node). After it ends, every node's store must come back to its idle usage (0 bytes),
and a next driver must be able to fill both stores.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import ember
import pytest
from ember.cluster_utils import Cluster
from ember_test_utils import head_and_far_node, wait_until

STORE = 160 * 1024 * 1024
# Short membership timings, as tests/cluster/conftest.py's clusters have.
DRIVER = Path(__file__).with_name("owner_driver.py")


@pytest.fixture(scope="module")
def two_nodes():
    # "far": 2, so the borrower test's actor (far: 1) leaves room for the drivers' tasks.
    with head_and_far_node(STORE, 2) as cluster:
        yield cluster


def _store_use(cluster: Cluster) -> dict[str, tuple[int, int]]:
    """(bytes used, objects) of every live node's store, straight from its raylet."""
    use = {}
    for node in cluster.list_all_nodes():
        stats = cluster.raylet_call(node, "node_stats")["store"]
        use[node.node_id.hex()[:8]] = (stats["used_bytes"], stats["num_objects"])
    return use


def _wait_idle(cluster: Cluster, why: str) -> None:
    last: dict = {}

    def idle() -> bool:
        last["use"] = _store_use(cluster)
        return all(used == 0 and n == 0 for used, n in last["use"].values())

    try:
        wait_until(idle, timeout=30, interval=0.2, message=why)
    except BaseException:
        print("store use (bytes, objects) by node:", last.get("use"))
        raise


@contextlib.contextmanager
def _driver(cluster: Cluster, mode: str, *extra: str, via=None) -> Iterator[subprocess.Popen]:
    """A driver process on node ``via`` (default: the head), killed if still running when
    the block ends."""
    head = cluster.head_node
    argv = [sys.executable, str(DRIVER), mode, head.gcs_address]
    argv += [os.path.dirname((via or head).session_dir), *extra]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(DRIVER.parent),
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _read_until(proc: subprocess.Popen, word: str) -> list[str]:
    """Reads the driver's output until ``word`` (its stdout closes at exit, so no hang);
    returns the lines before it."""
    seen = []
    for line in proc.stdout:
        if line.strip() == word:
            return seen
        seen.append(line.strip())
    proc.wait(timeout=30)
    pytest.fail(f"the driver exited ({proc.returncode}) before {word}: {proc.stderr.read()}")


def _assert_a_next_driver_fills_both_stores(cluster: Cluster) -> None:
    with _driver(cluster, "fill", str(STORE)) as proc:
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0 and "FILLED" in out, err[-3000:]
    _wait_idle(cluster, "the filling driver's objects to be freed")


@pytest.mark.parametrize("mode", ["exit", "shutdown", "raise", "sigkill"])
def test_a_drivers_objects_are_freed_on_every_node_however_it_ends(two_nodes, mode):
    cluster = two_nodes
    _wait_idle(cluster, "idle stores before the driver")
    with _driver(cluster, mode) as proc:
        said = _read_until(proc, "READY")
        use = _store_use(cluster)
        # Three 24 MiB objects on each node (two puts and a fetched result on the head; two
        # results and a pulled put on the far node).
        assert all(used >= 3 * 24 * 1024 * 1024 for used, _ in use.values()), use
        if mode != "sigkill":
            proc.stdin.write("end now\n")
            proc.stdin.flush()
        if mode == "shutdown":
            _read_until(proc, "SHUT_DOWN")  # the process lives on, its core worker is gone
        elif mode == "sigkill":
            proc.send_signal(signal.SIGKILL)
        if mode != "shutdown":
            proc.wait(timeout=60)
            assert proc.returncode == {"exit": 0, "raise": 1, "sigkill": -signal.SIGKILL}[mode]
        _wait_idle(cluster, f"every node's store to empty after the driver's {mode}")
    if mode == "sigkill":
        # The detached actor's result, written for the dead driver after it died, is
        # dropped as soon as it is sealed.
        writer = next(line.split()[1] for line in said if line.startswith("WRITER"))
        far = cluster.worker_nodes[0]
        wait_until(
            lambda: cluster.raylet_call(far, "node_stats")["owned_freed"]["late"] >= 1,
            timeout=30,
            interval=0.2,
            message="the detached actor's late result to reach the far node's store",
        )
        _wait_idle(cluster, "the late result to be dropped")
        cluster.gcs_call("kill_actor", {"actor_id": bytes.fromhex(writer), "no_restart": True})
    _assert_a_next_driver_fills_both_stores(cluster)


def test_a_borrower_gets_owner_died_error_once_the_owner_is_killed(two_nodes):
    cluster = two_nodes
    _wait_idle(cluster, "idle stores before the driver")
    cluster.connect(namespace="owner-lifetime", log_to_driver=False)
    try:

        @ember.remote(num_cpus=0, resources={"far": 1})
        class Keeper:
            def __init__(self) -> None:
                self.refs: list = []

            def keep(self, refs: list) -> None:
                self.refs = refs
                ember.get(refs[0])  # its location is now known here, and a copy pulled here

            def read(self) -> list[str]:
                outcome = []
                for ref in self.refs:
                    try:
                        ember.get(ref, timeout=30)
                        outcome.append("read")
                    except ember.exceptions.OwnerDiedError:
                        outcome.append("OwnerDiedError")
                    except Exception as e:
                        outcome.append(f"{type(e).__name__}: {e}")
                return outcome

        keeper = Keeper.options(name="keeper").remote()
        ember.get(keeper.read.remote(), timeout=60)  # up before the driver looks it up
        with _driver(cluster, "lend") as proc:
            _read_until(proc, "READY")
            proc.send_signal(signal.SIGKILL)
        # The keeper still holds the refs, but their owner is gone: nothing is kept.
        _wait_idle(cluster, "the killed lender's objects to be freed")
        assert ember.get(keeper.read.remote(), timeout=120) == ["OwnerDiedError"] * 4
        ember.kill(keeper)
    finally:
        ember.shutdown()
    _assert_a_next_driver_fills_both_stores(cluster)


def test_a_dead_nodes_drivers_objects_are_freed_on_the_other_nodes(cluster_factory):
    # The driver runs on the second node and its tasks on the head ("far" is there), so the
    # head holds its results and a copy of its put. Its node is then killed, raylet and all:
    # nobody is left to say the driver is gone but the GCS, which declares the node dead.
    cluster = cluster_factory(object_store_memory=STORE, resources={"far": 2})
    second = cluster.add_node(num_cpus=1, object_store_memory=STORE)
    _wait_idle(cluster, "idle stores before the driver")
    with _driver(cluster, "sigkill", via=second) as proc:
        _read_until(proc, "READY")
        assert _store_use(cluster)[cluster.head_node.node_id.hex()[:8]][0] >= 3 * 24 * 1024 * 1024
        cluster.remove_node(second, allow_graceful=False)
    _wait_idle(cluster, "the head's copies of the dead node's driver's objects to be freed")
