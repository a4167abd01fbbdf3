"""``/api/placement_groups`` and ``/api/placement_groups/{id}``: the GCS's placement groups
(from the dashboard's poll of the cluster), each bundle with the node it is reserved on."""

from __future__ import annotations

from typing import Any

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.routes.params import ListParams, json_response, list_params
from ember.dashboard.schemas import PLACEMENT_GROUPS
from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import Response

router = APIRouter(tags=["placement groups"])


@router.get(
    "/api/placement_groups", response_model=None, responses=PLACEMENT_GROUPS.page_responses()
)
async def list_placement_groups(
    q: ListParams = Depends(list_params), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    preds = q.predicates(PLACEMENT_GROUPS.filterable)
    return json_response(q.page(ctx.state.placement_group_rows(), preds))


@router.get(
    "/api/placement_groups/{placement_group_id}",
    response_model=None,
    responses=PLACEMENT_GROUPS.detail_responses(),
)
async def get_placement_group(
    placement_group_id: str, ctx: DashboardContext = Depends(get_ctx)
) -> dict[str, Any]:
    for row in ctx.state.placement_group_rows():
        if row["placement_group_id"] == placement_group_id:
            return row
    raise HTTPException(
        404, f"no placement group {placement_group_id}: `GET /api/placement_groups` lists them"
    )
