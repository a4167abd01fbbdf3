"""``/api/tasks``, ``/api/tasks/summary`` and ``/api/tasks/{id}``."""

from __future__ import annotations

from typing import Annotated, Any

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.routes.params import ListParams, json_response, list_params
from ember.dashboard.schemas import TASKS
from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response

router = APIRouter(tags=["tasks"])


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
    return {
        **rec.public(),
        "events": rec.events(),
        "attempts": ctx.state.tasks.attempts(rec.task_id),
    }
