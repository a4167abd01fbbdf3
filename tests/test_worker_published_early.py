"""A worker process's core worker is this process's worker before it connects to its node:
once registered, the node may send work that runs off the main thread (shared-process
actors' calls run on their own threads) while the main thread is still returning from the
connect, and user code there must find the worker. A worker process never starts a node of
its own: finding no worker (shut down, or not started), Ember calls there say so."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import ember

# In a fresh interpreter: the runner's own process may hold a driver of another test.
_ORDER_PROBE = textwrap.dedent(
    """
    from ember import global_state
    from ember.core_worker import core_worker as cw

    seen = {}

    async def connect_refused(self):
        seen["published while connecting"] = global_state.worker is self
        raise ConnectionRefusedError("no raylet here")

    cw.CoreWorker._connect_all = connect_refused
    node = {"node_id": b"\\1" * 16, "session_dir": "/nonexistent", "arena_path": "",
            "raylet_address": "unix:/nonexistent", "gcs_address": "unix:/nonexistent",
            "arena_capacity": 0}
    worker = cw.CoreWorker(mode=cw.WORKER, node=node, job_id=b"", worker_id=b"\\2" * 16)
    try:
        worker.start()
    except ConnectionRefusedError:
        seen["refused"] = True
    seen["none after the failed start"] = global_state.worker is None
    worker.loop.call_soon_threadsafe(worker.loop.stop)
    print(seen)
    """
)


def test_the_worker_is_published_before_it_connects_and_withdrawn_if_that_fails():
    out = subprocess.run(
        [sys.executable, "-c", _ORDER_PROBE], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str(
        {"published while connecting": True, "refused": True, "none after the failed start": True}
    )


@ember.remote
def _ember_call_with_the_worker_gone() -> str:
    from ember import global_state

    worker = global_state.worker
    global_state.worker = None  # as while it starts, or once it shut down
    try:
        ember.get_runtime_context()
    except RuntimeError as e:
        return str(e)
    finally:
        global_state.worker = worker
    return "a local node was started inside the worker"


def test_a_worker_without_its_worker_says_so_instead_of_starting_a_node(ember_start):
    ember_start(num_cpus=1)
    message = ember.get(_ember_call_with_the_worker_gone.remote(), timeout=60)
    assert "not connected to its node" in message
    assert "never starts a node of its own" in message
