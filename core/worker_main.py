"""Entry point of a worker process: ``python -m ember.worker_main`` (started by the raylet)."""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys


def _redirect_output(base: str) -> tuple[str, str]:
    """stdout and stderr go to ``worker-<id>-<pid>.out/.err`` (the layout of Ray 0.8's logs)."""
    paths = (base + ".out", base + ".err")
    for fd, path in zip((1, 2), paths, strict=True):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), line_buffering=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0), line_buffering=True)
    return paths


def _log_ember_records(base: str) -> None:
    """Ember's own log records in this worker (logger ``ember``, at the node's level: INFO,
    or ``init(logging_level=...)``) go to ``worker-<id>-<pid>.log``, created on the first
    record; without a handler Python dropped all but warnings. Warnings and errors also go to
    stderr as before, so ``log_to_driver`` still shows them."""
    import logging

    log = logging.getLogger("ember")
    to_file = logging.FileHandler(base + ".log", delay=True)
    to_file.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s %(process)d: %(message)s")
    )
    to_stderr = logging.StreamHandler(sys.stderr)
    to_stderr.setLevel(logging.WARNING)
    log.addHandler(to_file)
    log.addHandler(to_stderr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ember-worker")
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--session-dir", required=True)
    parser.add_argument("--raylet-address", required=True)
    parser.add_argument("--gcs-address", required=True)
    parser.add_argument("--arena-path", required=True)
    parser.add_argument("--arena-capacity", type=int, required=True)
    parser.add_argument("--node-ip", default="127.0.0.1")
    parser.add_argument("--raylet-pid", type=int, default=0)
    parser.add_argument("--token-file", default=None)
    args = parser.parse_args(argv)

    from ember.process_util import die_with_parent

    # A worker never outlives its raylet, whatever killed the raylet.
    die_with_parent(args.raylet_pid, signal.SIGKILL)
    base = os.path.join(args.session_dir, "logs", f"worker-{args.worker_id[:16]}-{os.getpid()}")
    log_paths = _redirect_output(base)
    _log_ember_records(base)

    from ember.core_worker.core_worker import WORKER, CoreWorker
    from ember.core_worker.executor import Executor

    node = {
        "node_id": bytes.fromhex(args.node_id),
        "session_dir": args.session_dir,
        "raylet_address": args.raylet_address,
        "gcs_address": args.gcs_address,
        "arena_path": args.arena_path,
        "arena_capacity": args.arena_capacity,
        "node_ip": args.node_ip,
        "token_file": args.token_file,
    }
    cw = CoreWorker(
        mode=WORKER,
        node=node,
        job_id=b"",
        worker_id=bytes.fromhex(args.worker_id),
        register_extra={"log_paths": log_paths},
    )
    cw.executor = Executor(cw)
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
