"""What a worker sends back for a task besides its values: the error replies, and the stamp of
where and when it ran.

Every reply says where it ran (pid, node, worker) and its phase times: the owner's end event
carries them to the dashboard, so a task that ended before its worker's next flush needs no
RUNNING event of its own (``TaskEvents.record_start``), and the timeline draws it on its
process's row. A task that printed also says which bytes of the worker's ``.out`` and
``.err`` are its own (Ray's ``task_log_info``).
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from typing import Any

import cloudpickle
from ember.core_worker.locations import error_location
from ember.core_worker.log_offsets import LogOffsets
from ember.core_worker.task_spec import TaskSpec
from ember.exceptions import TaskError, error_type_of, format_user_exception


def error_reply(spec: TaskSpec, error: BaseException, app: bool) -> dict:
    """Every return of ``spec`` holds ``error``; ``app``: the task's own code raised it (which
    ``retry_exceptions`` may retry). The text, with the remote traceback, rides along for the
    dashboard's task table."""
    return {
        "returns": [error_location(error)] * spec.num_returns,
        "error": True,
        "app_error": app,
        "error_type": error_type_of(error),
        "message": str(error)[:8000],
    }


def task_error(spec: TaskSpec, e: BaseException, ip: str, actor_repr: str | None) -> TaskError:
    """``e``, raised by the task's code, as the error its caller's get() raises."""
    tb = format_user_exception(e)
    # A nested task's error re-raised here keeps the user's exception as its cause, so the
    # caller's get() raises an instance of the original class at every level (the text
    # still carries both tracebacks: the nested one is in this one's message).
    inner: BaseException = e
    while isinstance(inner, TaskError) and inner.cause is not None:
        inner = inner.cause
    try:
        pickle.loads(cloudpickle.dumps(inner))
        cause = inner
    except Exception:
        cause = None
    return TaskError(spec.display_name(), tb, cause, pid=os.getpid(), ip=ip, actor_repr=actor_repr)


def stamp(
    reply: dict,
    timings: dict[str, float],
    host: Any,
    log_offsets: LogOffsets | None,
    log_from: tuple[int, int] | None,
) -> None:
    """Adds where and when the task ran to its ``reply`` (``host``: the core worker), and
    the log bytes it wrote since ``log_from`` (its output flushed first)."""
    timings["end"] = end = time.time()
    # A task that failed while executing ran that phase to the end (the timeline then
    # shows where the time went).
    if "args_ready" in timings and "executed" not in timings:
        timings["executed"] = end
    reply["timings"] = timings
    reply["pid"] = os.getpid()
    reply["node_id"] = host.node_id_hex
    reply["worker_id"] = host.worker_id
    if log_from is not None and log_offsets is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        now = log_offsets.now()
        # Only when it wrote something: most tasks print nothing, and their replies stay
        # as small as before.
        if now[0] != log_from[0] or now[1] != log_from[1]:
            reply["log"] = (log_from[0], now[0], log_from[1], now[1])
