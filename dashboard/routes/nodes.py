"""``/api/nodes``, ``/api/nodes/{id}``, ``/api/workers`` and ``/api/history``."""

from __future__ import annotations

from typing import Annotated, Any

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.routes.params import ListParams, json_response, list_params
from ember.dashboard.schemas import NODES, WORKERS
from ember.dashboard.state import NodeIdError
from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response

router = APIRouter(tags=["nodes"])


@router.get("/api/nodes", response_model=None, responses=NODES.page_responses())
async def list_nodes(
    q: ListParams = Depends(list_params), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    preds = q.predicates(NODES.filterable)
    rows = (ctx.state.node_row(nid) for nid in list(ctx.state.nodes))
    return json_response(
        q.page(
            rows,
            preds,
        )
    )


@router.get("/api/nodes/{node_id}", response_model=None, responses=NODES.detail_responses())
async def get_node(node_id: str, ctx: DashboardContext = Depends(get_ctx)) -> dict[str, Any]:
    node_id = resolve_node(ctx, node_id)
    st = ctx.state
    row = st.node_row(node_id)
    row["metrics"] = st.nodes[node_id].metrics
    row["info"] = st.nodes[node_id].info
    row["workers"] = st.node_workers(node_id)
    return row


@router.get("/api/workers", response_model=None, responses=WORKERS.page_responses())
async def list_workers(
    q: ListParams = Depends(list_params), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    preds = q.predicates(WORKERS.filterable)
    return json_response(
        q.page(
            ctx.state.all_workers(),
            preds,
        )
    )


@router.get("/api/history")
async def history(
    node_id: Annotated[
        str, Query(max_length=64, description="a node id, or 'cluster'")
    ] = "cluster",
    since: Annotated[float | None, Query(description="unix time; only samples after it")] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    key = node_id if node_id == "cluster" else resolve_node(ctx, node_id)
    return {
        "node_id": key,
        "window_s": ctx.state.history.seconds,
        "samples": ctx.state.history.query(key, since),
    }


def resolve_node(ctx: DashboardContext, node_id: str) -> str:
    """A full id or a unique prefix of one (``DashboardState.resolve_node_id``, the one
    resolver every endpoint taking a node id uses); else 404, or 400 naming the candidates."""
    try:
        return ctx.state.resolve_node_id(node_id)
    except NodeIdError as e:
        raise HTTPException(e.status, str(e)) from None
