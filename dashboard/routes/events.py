"""``/api/events``: the cluster's events of every severity (failed tasks with tracebacks,
crashed workers, lost nodes, the GCS's cluster events), newest first, filtered by any column
and by a time window (``since``/``until``, unix seconds)."""

from __future__ import annotations

from typing import Annotated

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.routes.params import ListParams, json_response, list_params
from ember.dashboard.schemas import EVENTS
from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

router = APIRouter(tags=["events"])


@router.get("/api/events", response_model=None, responses=EVENTS.page_responses())
async def list_events(
    q: ListParams = Depends(list_params),
    since: Annotated[float | None, Query(description="only events at or after (unix s)")] = None,
    until: Annotated[float | None, Query(description="only events before (unix s)")] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> Response:
    preds = q.predicates(EVENTS.filterable)
    rows = reversed(ctx.state.events)
    if since is not None or until is not None:
        lo = since if since is not None else float("-inf")
        hi = until if until is not None else float("inf")
        rows = (e for e in rows if lo <= e["time"] < hi)
    out = q.page(rows, preds)
    out["dropped"] = ctx.state.dropped["events"]
    return json_response(out)
