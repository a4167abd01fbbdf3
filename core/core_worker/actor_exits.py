"""How a worker's process ends when its own code ends it. An actor's exit on purpose
(``exit_actor()``, ``sys.exit(0)``, ``__ray_terminate__``, its handles gone) tells the GCS
first; any other ``sys.exit()`` in a method is a crash, as in Ray 2.60, and so is any
``sys.exit()`` in a task. Each runs the process's ``atexit`` handlers first, as Ray's do (a
kill never does).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
from typing import Any

logger = logging.getLogger(__name__)


def _run_atexit() -> None:
    try:
        atexit._run_exitfuncs()
    except Exception:  # a failing handler must not keep the process alive
        logger.exception("an atexit handler of the exiting actor failed")


def _flush_and_exit(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def crash(method: str, code: Any) -> None:
    """``sys.exit(code)`` in ``method``, ``code`` not 0 (a bare ``sys.exit()``, 1, a
    message): the actor's unexpected death. The process ends with no reply to the call, so
    the actor restarts within max_restarts and the call is retried within
    max_task_retries, as after a crash. A message is printed as Python prints it."""
    status = code
    if not isinstance(status, int):
        if status is not None:
            print(status, file=sys.stderr)
        status = 1
    _run_atexit()
    logger.error(
        "%s() called sys.exit(%r): the actor's process exits unexpectedly (only "
        "sys.exit(0) and exit_actor() end an actor on purpose)",
        method,
        code,
    )
    _flush_and_exit(status if status & 0xFF else 1)  # 256 would read as 0, a clean exit


def task_exit(task: str, code: Any) -> None:
    """``sys.exit(code)`` in ``task`` (any code, 0 too): Ray 2.60 ends the worker, and the
    task fails as after any worker crash (``WorkerCrashedError``, retried within its
    ``max_retries``). The process ends with no reply; a message is printed as Python would."""
    status = 0 if code is None else code
    if not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    _run_atexit()
    logger.error("%s() called sys.exit(%r): its worker process exits", task, code)
    _flush_and_exit(status & 0xFF)


def exit_on_purpose(host: Any, reason: str) -> None:
    """Ends the actor's process after telling the GCS it meant to (``host``: the core
    worker)."""
    _run_atexit()
    try:
        host.call_gcs_sync(
            "actor_exited", {"actor_id": host.actor_id, "reason": reason}, timeout=5.0
        )
    except Exception:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(0.05)  # let the last reply leave the socket
    _flush_and_exit(0)
