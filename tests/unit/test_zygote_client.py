"""The raylet's side of the fork server (``worker_pool.Zygote``): a fork that failed in the
zygote (out of pids or memory) ends that spawn with the zygote's reason, which is then the
worker's exit reason; the zygote itself goes on."""

from __future__ import annotations

import os
from types import SimpleNamespace

from ember.raylet.worker_pool import FORK_FAILED, ForkedProc, WorkerPool, WorkerProc, Zygote


def _zygote_reading(fd: int) -> Zygote:
    z = Zygote.__new__(Zygote)  # no process: read_messages reads our pipe
    z.proc = SimpleNamespace(stdout=SimpleNamespace(fileno=lambda: fd), poll=lambda: None)
    z._buf, z._procs, z._pending, z._exited, z.ready = b"", {}, [], {}, True
    return z


def test_a_failed_fork_ends_its_spawn_with_the_reason() -> None:
    r, w = os.pipe()
    try:
        z = _zygote_reading(r)
        failed, started = ForkedProc(0, z), ForkedProc(0, z)
        z._pending += [failed, started]
        os.write(
            w, b'{"spawn_failed": "fork failed: [Errno 11] Resource temporarily unavailable"}\n'
        )
        os.write(w, b'{"spawned": 4242}\n')
        z.read_messages()
        assert failed.returncode == FORK_FAILED and failed.pid == 0
        assert started.pid == 4242 and started.returncode is None
        pool = WorkerPool({"node_id": b"n"}, use_zygote=False)
        proc = WorkerProc(b"w" * 28, failed)
        pool.workers[proc.worker_id] = proc
        (dead,) = pool.reap()
        assert dead.exit_reason == "fork failed: [Errno 11] Resource temporarily unavailable"
    finally:
        os.close(r)
        os.close(w)
