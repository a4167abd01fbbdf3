"""``/api/tasks``, ``/api/tasks/summary`` and ``/api/tasks/{id}``."""

from __future__ import annotations

from typing import Annotated, Any

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.routes.params import ListParams, json_response, list_params
from ember.dashboard.schemas import TASKS
from ember.dashboard.task_logs import STREAMS, read_range, task_log_info
from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import PlainTextResponse, Response

router = APIRouter(tags=["tasks"])
CHUNK = 256 * 1024  # bytes per read of a log through the node's agent


@router.get("/api/tasks", response_model=None, responses=TASKS.page_responses())
async def list_tasks(
    q: ListParams = Depends(list_params), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    preds = q.predicates(TASKS.filterable)
    out = ctx.state.tasks.page(preds, q.limit, q.offset, q.sort_by, q.descending)
    out["dropped"] = ctx.state.dropped["tasks"]
    return json_response(out)


@router.get("/api/tasks/summary")
async def task_summary(
    job_id: str | None = None, ctx: DashboardContext = Depends(get_ctx)
) -> dict[str, Any]:
    """By function and state; of one job's tasks with ``job_id`` (the Jobs page's)."""
    table = ctx.state.tasks
    if job_id:
        by_function = table.summary(job_id.lower())
        by_state: dict[str, int] = {}
        for f in by_function:
            for state, n in f["states"].items():
                by_state[state] = by_state.get(state, 0) + n
        total = sum(by_state.values())
    else:
        by_function = table.summary()
        by_state, total = dict(table.counts["state"]), len(table)
    return {
        "total": total,
        "by_state": by_state,
        "by_function": by_function,
        "dropped": ctx.state.dropped["tasks"],
    }


@router.get("/api/tasks/{task_id}", response_model=None, responses=TASKS.detail_responses())
async def get_task(
    task_id: str,
    attempt: Annotated[
        int | None, Query(ge=0, description="this attempt (default: the newest)")
    ] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    """A task's attempt (the newest, or ``attempt``), its phases and every kept attempt."""
    rec = ctx.state.tasks.get(task_id.lower(), attempt)
    if rec is None:
        what = f"no task {task_id!r}" if attempt is None else f"no attempt {attempt} of {task_id!r}"
        raise HTTPException(
            404, f"{what} (never seen, or dropped past the cap); `ember list tasks` lists them"
        )
    flow = ctx.state.timeline.flows.get(rec.task_id)  # (parent task, ...), as Ray's row has it
    parent = flow[0] if flow else None
    return {
        **rec.public(),
        "events": rec.events(),
        "attempts": ctx.state.tasks.attempts(rec.task_id),
        "task_log_info": task_log_info(rec),
        # A driver's root task is no task of the table: null then, not a link to nothing.
        "parent_task_id": parent if parent and parent in ctx.state.tasks else None,
    }


@router.get("/api/tasks/{task_id}/log")
async def get_task_log(
    task_id: str,
    stream: str = Query("out", description="out (stdout) or err (stderr)"),
    attempt: Annotated[
        int | None, Query(ge=0, description="this attempt (default: the newest)")
    ] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    """The lines an attempt of the task (the newest by default) printed to ``stream`` (its
    bytes of its worker's log file), with the file and node they are read from."""
    return await _task_log(ctx, task_id, stream, attempt)


@router.get("/api/v0/logs/file")
async def ray_log_file(
    task_id: Annotated[str | None, Query(max_length=64)] = None,
    suffix: Annotated[str, Query(description="out or err")] = "out",
    attempt_number: Annotated[int, Query(ge=0)] = 0,
    lines: Annotated[int, Query(ge=-1)] = -1,
    ctx: DashboardContext = Depends(get_ctx),
) -> Response:
    """Ray's log download, for ``task_id`` (what ``ray logs task --id`` and Ray's
    ``get_log(task_id=...)`` ask for): the task's own lines as plain bytes; an error is a
    non-200 with its text, as Ray's clients read it. Files by name: ``ember logs``."""
    if task_id is None:
        return PlainTextResponse(
            "Ember serves /api/v0/logs/file for task_id only; for a file by name or pid use "
            "`ember logs` (or GET /api/logs/download)",
            status_code=400,
        )
    try:
        out = await _task_log(ctx, task_id, suffix, attempt_number)
    except HTTPException as e:
        return PlainTextResponse(str(e.detail), status_code=e.status_code)
    if out.get("note"):
        return PlainTextResponse(f"task {task_id}: {out['note']}", status_code=404)
    text = out["text"]
    if lines >= 0:
        text = "".join(text.splitlines(keepends=True)[-lines:] if lines else [])
    return Response(text.encode("utf-8", "surrogateescape"), media_type="text/plain")


async def _task_log(
    ctx: DashboardContext, task_id: str, stream: str, attempt: int | None = None
) -> dict[str, Any]:
    if stream not in STREAMS:
        raise HTTPException(400, f"stream must be 'out' or 'err', got {stream!r}")
    rec = ctx.state.tasks.get(task_id.lower(), attempt)
    if rec is None:
        what = f"no task {task_id!r}" if attempt is None else f"no attempt {attempt} of {task_id!r}"
        raise HTTPException(404, f"{what}; `ember list tasks` lists them")
    info = task_log_info(rec)
    if info is None:
        raise HTTPException(404, f"task {task_id} has not run on a worker yet")
    key = "stdout" if stream == "out" else "stderr"
    name, start, end = info[f"{key}_file"], info[f"{key}_start"], info[f"{key}_end"]
    # The node that holds the file: found by name, not by the task's node column.
    node_id = next(
        (n for n, files in ctx.state.logs.items() if any(f["name"] == name for f in files)),
        rec.node_id,
    )
    out: dict[str, Any] = {
        "task_id": rec.task_id,
        "attempt": rec.attempt,
        "node_id": node_id,
        "pid": rec.pid,
        "file": name,
        "start": start,
        "end": end,
        "text": "",
        "left_out": 0,
    }
    if start is None:
        out["note"] = "where its lines start is not known (yet)"
        return out
    if end is None:  # running, or its worker died: its lines run to the file's end for now
        out["open_ended"] = True
    if end is None or end > start:
        if ctx.hub is None or not node_id:
            raise HTTPException(503, "no agent can read this node's logs now")
        res = await read_range(ctx.hub, node_id, name, start, end, CHUNK)
        if "error" in res:
            raise HTTPException(int(res.get("status") or 503), res["error"])
        out["text"], out["left_out"] = res["text"], res["left_out"]
    return out
