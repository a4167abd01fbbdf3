"""The fork server: a process that has imported the worker's modules once and forks workers.

A new interpreter costs ~150 ms of CPU before it can run a task (imports dominate); a fork of
this process costs a few milliseconds, which is what nested tasks (a blocked worker needs a
replacement) and actor creation wait for. The zygote stays single-threaded, so forking is safe.

Protocol on its stdin/stdout (lines of JSON):
  raylet → zygote: {"spawn": [worker_main args]}
  zygote → raylet: {"spawned": pid}            after each fork
  zygote → raylet: {"spawn_failed": reason}     when a fork fails (the spawn's turn)
  zygote → raylet: {"exited": pid, "code": n}  when a child ends (negative: killed by signal)
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys

from ember.raylet import hot_code, zygote_heap

# What fills the heap's free blocks and chunks before the first fork (zygote_heap.py).
_FILLERS: list[object] = []


def _preimport() -> None:
    # Everything a worker imports on its way to running its first task or actor: what a
    # child imports itself is private to it (~160 kB for shutil and its compressors).
    import shutil  # noqa: F401

    import cloudpickle  # noqa: F401
    import ember  # noqa: F401
    import ember.config
    import ember.core_worker.core_worker  # noqa: F401
    import ember.core_worker.executor  # noqa: F401
    import ember.core_worker.memory_trace  # noqa: F401
    import ember.log_format  # noqa: F401 - the worker's log formatter (worker_main)
    import ember.object_store.arena  # noqa: F401
    import ember.protocol.stream
    import ember.worker_main  # noqa: F401

    ember.core_worker.core_worker.prepare_for_fork()
    # The node's level, which each child sets too (a child setting it anew clears every
    # logger's cache, writing to their pages).
    ember.config.apply_logging_level()
    ember.worker_main.prepare_log_handlers()
    # The event loop policy, made on first use: here, not in every child's I/O thread.
    asyncio.get_event_loop_policy()
    # A loop made and closed here leaves uvloop's lazily built module state shared (and
    # ``zero_pages``' handle on madvise).
    ember.protocol.stream.new_event_loop().close()


def _empty_method_cache() -> None:
    """Before a fork. CPython 3.11's method cache (4,096 slots of type, name, value) holds a
    reference to each name it caches: a child filling a slot lets go of the name the zygote
    left there, writing to that string's page, ~100 pages an idle actor copied for nothing
    (docs/benchmarks-memory.md). Emptied, its slots hold None. From 3.12 strings that are
    interned are immortal, their counts never written, so this only costs the child misses."""
    if sys.version_info < (3, 12):
        sys._clear_type_cache()


def _child(args: list[str], out_fd: int, in_fd: int) -> None:
    os.close(out_fd)
    os.close(in_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from ember import ids
    from ember.core_worker import memory_trace

    ids.reseed_after_fork()
    memory_trace.start_after_fork()  # off unless EMBER_WORKER_MEMORY_TRACE is set
    # Our parent is the zygote (which dies with the raylet): tie our life to it.
    if "--raylet-pid" in args:
        args[args.index("--raylet-pid") + 1] = str(os.getppid())
    from ember import worker_main

    try:
        worker_main.main(args)
    finally:
        os._exit(0)


def main() -> None:
    parent = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    from ember.process_util import die_with_parent

    die_with_parent(parent, signal.SIGKILL)
    _preimport()
    # Objects the imports made move to a generation the collector never scans: a child's
    # collection would otherwise write to the header of every one of them, copying nearly
    # every page of the heap it shares with us (the bulk of an idle actor's private memory).
    gc.collect()
    gc.freeze()
    global _FILLERS
    _FILLERS = zygote_heap.fill_free_blocks()
    _FILLERS.append(zygote_heap.fill_malloc_chunks())
    # The code every worker runs, copied next to each other past the fillers.
    _FILLERS.append(hot_code.compact(hot_code.load()))
    gc.freeze()  # the fillers' list, too
    in_fd = sys.stdin.fileno()
    out_fd = sys.stdout.fileno()
    reader = os.fdopen(os.dup(in_fd), "r")

    def send(msg: dict) -> None:
        data = (json.dumps(msg) + "\n").encode()
        try:
            os.write(out_fd, data)
        except OSError:
            os._exit(0)

    def reap(signum, frame) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            send({"exited": pid, "code": code})

    signal.signal(signal.SIGCHLD, reap)
    send({"ready": os.getpid()})
    while True:
        try:
            line = reader.readline()
        except InterruptedError:
            continue
        if not line:
            os._exit(0)  # the raylet closed our pipe: it is gone
        msg = json.loads(line)
        args = msg["spawn"]
        _empty_method_cache()
        try:
            pid = os.fork()
        except OSError as e:
            # Out of processes (pid_max, threads-max, ulimit -u) or memory: say so and go
            # on; a zygote that died here took every worker it had forked with it.
            send({"spawn_failed": f"fork failed: {e}"})
            continue
        if pid == 0:
            reader.close()
            _child(args, out_fd, in_fd)
        send({"spawned": pid})


if __name__ == "__main__":
    main()
