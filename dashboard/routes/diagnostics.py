"""``/api/stack`` and ``/api/profile``: py-spy on a worker (or every worker of a node)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.routes.nodes import resolve_node
from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response

router = APIRouter(tags=["diagnostics"])


def _node_of_pid(ctx: DashboardContext, pid: int) -> str:
    for nid, workers in ctx.state.workers.items():
        if pid in workers:
            return nid
    raise HTTPException(404, f"no Ember process with pid {pid} on any node; GET /api/workers")


@router.get("/api/stack")
async def stack(
    node_id: Annotated[
        str | None, Query(max_length=64, description="every worker of a node")
    ] = None,
    pid: Annotated[int | None, Query(ge=1, le=2**22, description="one process")] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    """Stacks of one process (``pid``), of one node's processes, or of every node's."""
    if ctx.hub is None:
        raise HTTPException(503, "no agents are connected to this dashboard")
    if pid is not None:
        nid = resolve_node(ctx, node_id) if node_id else _node_of_pid(ctx, pid)
        targets = {nid: [pid]}
    elif node_id is not None:
        targets = {resolve_node(ctx, node_id): None}
    else:
        targets = {nid: None for nid in ctx.hub.connected_nodes()}
    nodes = []
    for nid, pids in targets.items():
        try:
            res = await ctx.hub.call(nid, "stack", {"pids": pids}, timeout=60)
        except Exception as e:
            res = {"error": str(e), "processes": []}
        nodes.append({"node_id": nid, **res})
    return {"nodes": nodes}


@router.get("/api/profile")
async def profile(
    pid: Annotated[int, Query(ge=1, le=2**22, description="the process to record")],
    duration: Annotated[
        int, Query(ge=1, le=60, description="seconds (10, 30 or 60 in the UI)")
    ] = 10,
    format: Annotated[
        Literal["speedscope", "svg"], Query(description="result format")
    ] = "speedscope",
    node_id: Annotated[str | None, Query(max_length=64)] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> Response:
    """Records ``pid`` with py-spy for ``duration`` s: speedscope JSON or an SVG flame graph."""
    if ctx.hub is None:
        raise HTTPException(503, "no agents are connected to this dashboard")
    nid = resolve_node(ctx, node_id) if node_id else _node_of_pid(ctx, pid)
    res = await ctx.hub.call(
        nid,
        "profile",
        {"pid": pid, "duration": duration, "format": format},
        timeout=duration + 30,
    )
    if res.get("error"):
        return Response(
            content=_json({"detail": res["error"]}),
            status_code=res.get("status", 500),
            media_type="application/json",
        )
    media = "image/svg+xml" if format == "svg" else "application/json"
    return Response(content=res["data"], media_type=media)


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj)
