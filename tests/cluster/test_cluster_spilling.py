"""Spilling across nodes (issue 19): another node reads a spilled object (the source raylet
restores it for the transfer), an owner's death deletes its spilled copies' files, and a
raylet killed by SIGKILL leaves no spill files once ``ember stop`` has run."""

from __future__ import annotations

import glob
import hashlib
import os
import signal
import subprocess

import ember
import numpy as np
import pytest
from ember.cluster_utils import Cluster
from ember_test_utils import (
    ember_cli,
    head_and_far_node,
    sigkill_driver_when_ready,
    wait_until,
)

MB = 1_000_000
STORE = 100 * MB


def _array(i: int, size: int = 20 * MB) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 256, size, dtype=np.uint8)


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(a.tobytes()).hexdigest()


@pytest.fixture
def two_nodes():
    with head_and_far_node(STORE, 1) as cluster:
        yield cluster


def _files(node) -> list[str]:
    return glob.glob(os.path.join(node.spill_dir, "*.spill"))


def _store(cluster: Cluster, node) -> dict:
    return cluster.raylet_call(node, "node_stats")["store"]


def test_another_node_reads_spilled_objects(two_nodes):
    cluster = two_nodes
    head = cluster.head_node
    cluster.connect(log_to_driver=False)

    @ember.remote(resources={"far": 1})
    def digest_there(a: np.ndarray) -> str:
        return _digest(a)

    refs = [ember.put(_array(i)) for i in range(8)]  # 160 MB in the head's 100 MB store
    wait_until(lambda: _files(head), 30, 0.1, "the head to spill")
    spilled = _store(cluster, head)["num_spilled"]
    assert spilled >= 3
    # The far node pulls each from the head, which reads the spilled ones back to send them.
    assert ember.get([digest_there.remote(r) for r in refs], timeout=180) == [
        _digest(_array(i)) for i in range(8)
    ]
    assert _store(cluster, head)["num_restored_total"] >= spilled
    del refs
    wait_until(lambda: not _files(head), 30, 0.1, "the freed objects' files to go")


DRIVER = """
import sys, time, numpy as np, ember
ember.init(address=sys.argv[1], temp_dir=sys.argv[2], log_to_driver=False)
held = [ember.put(np.full(20_000_000, i, dtype=np.uint8)) for i in range(8)]
print("READY", flush=True)
time.sleep(600)
"""


def test_an_owners_death_deletes_its_spilled_files(two_nodes):
    cluster = two_nodes
    head = cluster.head_node
    sigkill_driver_when_ready(
        DRIVER,
        [head.gcs_address, os.path.dirname(head.session_dir)],
        "READY",
        lambda: wait_until(
            lambda: _store(cluster, head)["num_spilled"] >= 3 and _files(head),
            30,
            0.1,
            "the driver's objects to spill",
        ),
    )
    wait_until(lambda: not _files(head), 30, 0.1, "the dead owner's spill files to go")
    store = _store(cluster, head)
    assert (store["num_spilled"], store["spilled_bytes"], store["used_bytes"]) == (0, 0, 0)


def test_a_killed_raylet_leaves_no_spill_files_after_ember_stop(two_nodes):
    cluster = two_nodes
    far = cluster.worker_nodes[0]
    cluster.connect(log_to_driver=False)

    @ember.remote(resources={"far": 1})
    def leave_objects() -> list:
        # The task's worker owns these and lives on: they stay, spilled, on the far node.
        return [ember.put(np.full(20 * MB, i, dtype=np.uint8)) for i in range(8)]

    held = ember.get(leave_objects.remote(), timeout=120)
    wait_until(lambda: len(_files(far)) >= 3, 30, 0.1, "the far node to spill")
    ember.shutdown()
    far.procs["raylet"].send_signal(signal.SIGKILL)
    far.procs["raylet"].wait(10)
    assert _files(far)  # nobody removed them yet
    out = subprocess.run(
        [ember_cli(), "stop", "--temp-dir", far.temp_dir],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert not os.path.exists(far.spill_dir), os.listdir(far.spill_dir)
    del held


def test_ember_start_spilling_flags(tmp_path):
    from ember_test_utils import head_cluster

    if ember.is_initialized():
        ember.shutdown()
    spill_root = tmp_path / "spill-here"
    flags = ["--object-spilling-directory", str(spill_root)]
    flags += ["--object-spilling-max-bytes", str(150 * MB)]
    with head_cluster(*flags) as (root, port, _):
        ember.init(address=f"127.0.0.1:{port}", temp_dir=root, log_to_driver=False)
        try:
            # 64 MiB store (head_cluster's): 100 MB of puts spill into the named directory.
            refs = [ember.put(_array(i, 10 * MB)) for i in range(10)]
            stats = ember.global_state.worker.call_raylet_sync("node_stats", None)
            assert stats["spill"]["max_bytes"] == 150 * MB
            assert stats["spill"]["directory"].startswith(str(spill_root))
            wait_until(
                lambda: glob.glob(str(spill_root / "ember-spill-*" / "*.spill")),
                30,
                0.1,
                "spill files in the directory given to ember start",
            )
            assert _digest(ember.get(refs[0])) == _digest(_array(0, 10 * MB))
        finally:
            ember.shutdown()
    # ember stop (head_cluster's end) leaves nothing spilled behind.
    assert glob.glob(str(spill_root / "ember-spill-*")) == []
