"""``/api/events``: errors (failed tasks with tracebacks, crashed workers) and cluster events."""

from __future__ import annotations

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.routes.params import ListParams, json_response, list_params
from ember.dashboard.schemas import EVENTS
from fastapi import APIRouter, Depends
from fastapi.responses import Response

router = APIRouter(tags=["events"])


@router.get("/api/events", response_model=None, responses=EVENTS.page_responses())
async def list_events(
    q: ListParams = Depends(list_params), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    preds = q.predicates(EVENTS.filterable)
    out = q.page(
        reversed(ctx.state.events),
        preds,
    )
    out["dropped"] = ctx.state.dropped["events"]
    return json_response(out)
