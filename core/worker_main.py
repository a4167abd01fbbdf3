"""Entry point of a worker process: ``python -m ember.worker_main`` (started by the raylet)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from ember.core_worker.log_offsets import LogOffsets, counting_stream


def _redirect_output(base: str) -> tuple[tuple[str, str], LogOffsets]:
    """stdout and stderr go to ``worker-<id>-<pid>.out/.err`` (the layout of Ray 0.8's logs);
    with where they end now, for each task's share of them."""
    paths = (base + ".out", base + ".err")
    for fd, path in zip((1, 2), paths, strict=True):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout, out = counting_stream(1)
    sys.stderr, err = counting_stream(2)
    return paths, LogOffsets(out, err)


# Ember's two handlers for a worker's log records, made before the worker's file and stream
# are known: the zygote makes them once before it forks (``prepare_log_handlers``). A child
# that made its own ran ~20 of logging's functions, copying the shared pages they touch
# (0.06-0.1 MiB per worker, benchmarks/actor_memory.py).
_handlers: tuple[Any, Any] | None = None
_core_worker: list = []  # the core worker, once made: the ids a log record carries


def _log_context() -> dict[str, str | None]:
    return _ids(_core_worker[0]) if _core_worker else {}


def prepare_log_handlers() -> tuple[Any, Any]:
    """Makes the handlers ``_log_ember_records`` attaches (in the zygote, before forking)."""
    import logging

    from ember.log_format import TEXT_FORMAT, formatter

    global _handlers
    to_file = logging.FileHandler(os.devnull, delay=True)  # each worker names its own file
    to_file.setFormatter(formatter("worker", context=_log_context))
    to_stderr = logging.StreamHandler(sys.stderr)
    to_stderr.setFormatter(logging.Formatter(TEXT_FORMAT))
    to_stderr.setLevel(logging.WARNING)
    _handlers = (to_file, to_stderr)
    return _handlers


def _log_ember_records(base: str) -> None:
    """Ember's own log records in this worker (logger ``ember``, at the node's level: INFO,
    or ``init(logging_level=...)``) go to ``worker-<id>-<pid>.log``, created on the first
    record; without a handler Python dropped all but warnings. With ``EMBER_LOG_FORMAT=json``
    each is a JSON object carrying the job, the task on the logging thread and the actor.
    Warnings and errors also go to stderr as text, as before, so ``log_to_driver`` still
    shows them beside the user's output."""
    import logging

    to_file, to_stderr = _handlers or prepare_log_handlers()
    to_file.baseFilename = os.path.abspath(base + ".log")
    to_stderr.stream = sys.stderr  # the counting stream _redirect_output made
    log = logging.getLogger("ember")
    log.addHandler(to_file)
    log.addHandler(to_stderr)


def _ids(cw: Any) -> dict[str, str | None]:
    """The job, the task running on the calling thread and the actor of this worker."""
    task_id = getattr(cw.current, "task_id", None)
    actor_id = getattr(cw, "actor_id", None)
    job_id = getattr(cw, "job_id", b"")
    return {
        "job_id": job_id.hex() if job_id else None,
        "task_id": task_id.hex() if task_id else None,
        "actor_id": actor_id.hex() if actor_id else None,
    }


# The raylet's arguments (worker_pool.start_worker): name, required. Parsed by hand, not by
# argparse: a forked worker building an ArgumentParser wrote to ~1.2 MB of the pages it
# shares with the zygote, a fifth of an idle actor's private memory.
_OPTIONS = {
    "worker-id": True,
    "node-id": True,
    "session-dir": True,
    "raylet-address": True,
    "gcs-address": True,
    "arena-path": True,
    "arena-capacity": True,
    "node-ip": False,
    "raylet-pid": False,
    "token-file": False,
}


def parse_args(argv: list[str]) -> dict[str, str]:
    """``--name value`` pairs into {name: value}; a clear error for anything else."""
    if len(argv) % 2:
        raise SystemExit(f"ember-worker: expected --name value pairs, got {argv!r}")
    opts: dict[str, str] = {}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        name = flag[2:] if flag.startswith("--") else ""
        if name not in _OPTIONS:
            raise SystemExit(
                f"ember-worker: unknown option {flag!r} (known: {', '.join(_OPTIONS)})"
            )
        opts[name] = value
    missing = [n for n, required in _OPTIONS.items() if required and n not in opts]
    if missing:
        raise SystemExit(f"ember-worker: missing {', '.join('--' + n for n in missing)}")
    return opts


def main(argv: list[str] | None = None) -> None:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    worker_id, session_dir = opts["worker-id"], opts["session-dir"]

    from ember.process_util import die_with_parent

    # A worker never outlives its raylet, whatever killed the raylet.
    die_with_parent(int(opts.get("raylet-pid", 0)), signal.SIGKILL)
    base = os.path.join(session_dir, "logs", f"worker-{worker_id[:16]}-{os.getpid()}")
    log_paths, log_offsets = _redirect_output(base)
    _log_ember_records(base)

    from ember import global_state
    from ember.core_worker.core_worker import WORKER, CoreWorker
    from ember.core_worker.executor import Executor

    global_state.in_worker_process = True

    node = {
        "node_id": bytes.fromhex(opts["node-id"]),
        "session_dir": session_dir,
        "raylet_address": opts["raylet-address"],
        "gcs_address": opts["gcs-address"],
        "arena_path": opts["arena-path"],
        "arena_capacity": int(opts["arena-capacity"]),
        "node_ip": opts.get("node-ip", "127.0.0.1"),
        "token_file": opts.get("token-file"),
    }
    cw = CoreWorker(
        mode=WORKER,
        node=node,
        job_id=b"",
        worker_id=bytes.fromhex(worker_id),
        register_extra={"log_paths": log_paths},
    )
    _core_worker.append(cw)
    cw.executor = Executor(cw)
    cw.executor.log_offsets = log_offsets  # stdout and stderr are the log files opened above
    cw.executor.install_interrupt_handler()
    cw.start()
    try:
        cw.executor.run()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
