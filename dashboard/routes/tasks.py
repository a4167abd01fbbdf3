"""``/api/tasks``, ``/api/tasks/summary`` and ``/api/tasks/{id}``."""

from __future__ import annotations

from typing import Any

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.routes.params import ListParams, json_response, list_params
from ember.dashboard.schemas import TASKS
from fastapi import APIRouter, Depends, HTTPException
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
async def task_summary(ctx: DashboardContext = Depends(get_ctx)) -> dict[str, Any]:
    table = ctx.state.tasks
    return {
        "total": len(table),
        "by_state": dict(table.counts["state"]),
        "by_function": table.summary(),
        "dropped": ctx.state.dropped["tasks"],
    }


@router.get("/api/tasks/{task_id}", response_model=None, responses=TASKS.detail_responses())
async def get_task(task_id: str, ctx: DashboardContext = Depends(get_ctx)) -> dict[str, Any]:
    rec = ctx.state.tasks.get(task_id.lower())
    if rec is None:
        raise HTTPException(
            404, f"no task {task_id!r} (never seen, or dropped past the cap); GET /api/tasks"
        )
    return {**rec.public(), "events": rec.events()}
