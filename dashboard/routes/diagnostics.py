"""``/api/stack`` and ``/api/profile``: py-spy on a worker (or every worker of a node).

Only the node's Ember processes may be sampled (the workers the agents report and the actors'
processes the GCS reports): the dashboard is not a way to read any process of the machine.
A py-spy failure answers with the status ``pyspy.classify`` gives it (404, 422 or 503), never
a 500. A whole-cluster ``/api/stack`` names the nodes it could not reach in ``missing``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from ember.dashboard.app import AgentUnavailable, DashboardContext, get_ctx
from ember.dashboard.routes.nodes import resolve_node
from ember.dashboard.routes.objects import unreachable_nodes
from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response

router = APIRouter(tags=["diagnostics"])


def _is_ember_pid(ctx: DashboardContext, node_id: str, pid: int) -> bool:
    if pid in ctx.state.workers.get(node_id, {}):
        return True
    # An actor's process is known from the GCS a moment before the agent's next sample.
    return any(
        a.get("pid") == pid and a.get("node_id") == node_id for a in ctx.state.actors.values()
    )


def _node_of_pid(ctx: DashboardContext, pid: int, node_id: str | None) -> str:
    """The node of an Ember process ``pid`` (on ``node_id`` when given); else 404."""
    if node_id:
        nid = resolve_node(ctx, node_id)
        if _is_ember_pid(ctx, nid, pid):
            return nid
        raise HTTPException(
            404,
            f"no Ember process with pid {pid} on node {nid[:12]}; GET /api/workers lists them "
            "(the agents report every 2 s)",
        )
    for nid in ctx.state.nodes:
        if _is_ember_pid(ctx, nid, pid):
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
    """Stacks of one process (``pid``), of one node's processes, or of every node's.

    ``missing`` names (``{node_id: why}``) the nodes of the cluster whose agents could not be
    asked; a request for one node or one process whose agent is away answers 503 instead."""
    if ctx.hub is None:
        raise HTTPException(503, "no agents are connected to this dashboard")
    if pid is not None:
        targets: dict[str, list[int] | None] = {_node_of_pid(ctx, pid, node_id): [pid]}
    elif node_id is not None:
        targets = {resolve_node(ctx, node_id): None}
    else:
        targets = {nid: None for nid in ctx.hub.connected_nodes()}
    whole_cluster = pid is None and node_id is None
    missing = unreachable_nodes(ctx) if whole_cluster else {}
    nodes = []
    for nid, pids in targets.items():
        try:
            res = await ctx.hub.call(nid, "stack", {"pids": pids}, timeout=60)
        except AgentUnavailable as e:
            if not whole_cluster:
                raise
            missing[nid] = str(e)
            continue
        if pid is not None:
            _raise_for_single(res)
        for proc in res.get("processes") or ():
            # The agent names the lease's first task; the task events say what runs now.
            known, name = ctx.state.current.running(proc.get("worker_id"))
            if known and proc.get("kind") == "worker":
                proc["current_task"] = name
        nodes.append({"node_id": nid, **res})
    return {"nodes": nodes, "missing": missing}


def _raise_for_single(res: dict[str, Any]) -> None:
    """One process asked for: its py-spy failure is the answer's status (404, 422, 503)."""
    procs = res.get("processes") or []
    if res.get("error"):
        raise HTTPException(503, res["error"])
    if procs and procs[0].get("error") and procs[0].get("status", 503) != 503:
        raise HTTPException(procs[0]["status"], procs[0]["error"])


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
    nid = _node_of_pid(ctx, pid, node_id)
    res = await ctx.hub.call(
        nid,
        "profile",
        {"pid": pid, "duration": duration, "format": format},
        timeout=duration + 30,
    )
    if res.get("error"):
        # The agent classified the failure; an older agent without a status is the node's
        # condition (503), not a bug of the dashboard.
        return Response(
            content=json.dumps({"detail": res["error"]}),
            status_code=int(res.get("status") or 503),
            media_type="application/json",
        )
    media = "image/svg+xml" if format == "svg" else "application/json"
    return Response(content=res["data"], media_type=media)
