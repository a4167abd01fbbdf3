"""A task's own log lines: the bytes of its worker's ``.out`` and ``.err`` files that one
attempt wrote (Ray's ``task_log_info``).

A worker's stdout and stderr are its log files, ``worker-<id16>-<pid>.out/.err``
(``worker_main``); the executor measures both files at a task's start and end and the
reply carries the two ranges when the task printed anything (``executor._add_log_range``).
The owner's FINISHED or FAILED event brings them to the task table (``TaskTable.logs``).
Here they become Ray's row field and the lines themselves, read through the node's agent in
bounded chunks.

The worker's RUNNING event carries where its files end as the task starts (``log_at``), so a
running task shows its lines so far, and one whose worker was killed mid-task (no reply, no
end) its lines up to the end of the dead worker's file. Limits, said where they show: calls
of a threaded or async actor that run at once share the file, so one call's range can hold a
neighbour's lines. Each attempt (a row of the task table) keeps its own range.
"""

from __future__ import annotations

from typing import Any

from ember.dashboard.task_table import DIED, TaskView

MAX_BYTES = 1024 * 1024  # of one stream shown per request: a task can print gigabytes
STREAMS = ("out", "err")


def log_files(worker_id: str | None, pid: int | None) -> tuple[str, str] | None:
    """The names of a worker's stdout and stderr files, or None when the worker is unknown."""
    if not worker_id or not pid:
        return None
    base = f"worker-{worker_id[:16]}-{pid}"
    return base + ".out", base + ".err"


def task_log_info(task: TaskView) -> dict[str, Any] | None:
    """Ray's ``task_log_info`` of one attempt of a task: its worker's two files and the
    byte range of each the attempt wrote. An ended attempt with no recorded range printed
    nothing (start == end); a running one has no offsets yet (None)."""
    files = log_files(task.worker_id, task.pid)
    if files is None:
        return None
    info: dict[str, Any] = {"stdout_file": files[0], "stderr_file": files[1]}
    rng = task._table.logs.get(task.slot)
    ended = task.state in ("FINISHED", "FAILED")
    if rng is not None and rng[0] == task.attempt:
        # An end of -1: not known (running, or its worker died): the lines run to the
        # file's end for now (None in Ray's row).
        offsets = tuple(None if v < 0 else v for v in rng[1:])
        if ended and offsets[1] is None and not _died(task):
            offsets = (0, 0, 0, 0)  # ended without a range: it printed nothing
    elif ended and not _died(task):
        offsets = (0, 0, 0, 0)  # printed nothing: an empty range
    else:
        offsets = (None, None, None, None)
    for key, v in zip(
        ("stdout_start", "stdout_end", "stderr_start", "stderr_end"), offsets, strict=True
    ):
        info[key] = v
    return info


def _died(task: TaskView) -> bool:
    """Whether the attempt ended with its worker (no reply, so no range was sent)."""
    return (task.error_type or "") in DIED


async def read_range(
    hub: Any, node_id: str, name: str, start: int, end: int | None, chunk: int
) -> dict[str, Any]:
    """``name``'s bytes [start, end) on ``node_id`` (``end`` None: to the file's end now;
    at most ``MAX_BYTES`` of them), as ``{"text", "left_out"}``; ``{"error"}`` when the
    agent cannot read it."""
    stop = start + MAX_BYTES if end is None else min(end, start + MAX_BYTES)
    parts: list[str] = []
    offset = start
    while offset < stop:
        body = {"name": name, "offset": offset, "size": min(chunk, stop - offset)}
        try:
            res = await hub.call(node_id, "log_read", body, timeout=10)
        except Exception as e:  # the node's agent is away (a dead node): say so
            return {"error": f"the log of node {node_id[:12]} cannot be read now: {e}"}
        if res.get("error"):
            return {"error": res["error"], "status": res.get("status")}
        if res.get("rotated"):
            return {"error": f"{name} was rotated since the task ran; its lines are gone"}
        data = res.get("data", "")
        if not data:
            break
        parts.append(data)
        offset = int(
            res.get("next_offset") or offset + len(data.encode("utf-8", "surrogateescape"))
        )
    text = "".join(parts)
    return {"text": text, "left_out": 0 if end is None else max(0, end - stop)}
