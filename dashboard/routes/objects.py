"""``/api/objects``: the memory view (every ObjectRef pinning an object, as ``ember memory``).

Collecting references asks every process of a node, so it runs on demand, not on a timer:
each agent is asked at most once per ``max_age`` seconds. Only rows of nodes that answered are
served: a node whose agent did not answer, is disconnected, or never connected is listed in
``missing`` (``{node_id: why}``) and its older rows are left out, not served as current.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.routes.params import ListParams, json_response, list_params
from ember.dashboard.schemas import OBJECTS
from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

router = APIRouter(tags=["objects"])


@router.get("/api/objects", response_model=None, responses=OBJECTS.page_responses())
async def list_objects(
    q: ListParams = Depends(list_params),
    max_age: Annotated[float, Query(ge=0, le=3600, description="reuse rows this fresh (s)")] = 2.0,
    ctx: DashboardContext = Depends(get_ctx),
) -> Response:
    preds = q.predicates(OBJECTS.filterable)
    missing = await refresh_objects(ctx, max_age)
    st = ctx.state
    rows = [r for rows in st.objects.values() for r in rows]
    out = q.page(
        rows,
        preds,
    )
    out["missing"] = missing
    out["summary"] = _summary(rows)
    out["store"] = ctx.extra.get("object_store", {})
    return json_response(out)


def unreachable_nodes(ctx: DashboardContext) -> dict[str, str]:
    """``{node_id: why}`` of the cluster's nodes whose agents cannot be asked right now: known
    to the dashboard but disconnected, or alive in the GCS with no agent connected yet."""
    connected = set(ctx.hub.connected_nodes()) if ctx.hub is not None else set()
    out: dict[str, str] = {}
    for nid, node in ctx.state.nodes.items():
        if nid not in connected:
            why = node.lost_reason or "not connected"
            out[nid] = f"the agent of node {nid[:12]} is not connected ({why})"
    for n in ctx.state.cluster.get("nodes", []):
        nid = str(n.get("node_id") or "")
        if nid and n.get("state") == "ALIVE" and nid not in connected and nid not in out:
            out[nid] = f"node {nid[:12]} is alive but its agent never connected to the dashboard"
    return out


async def refresh_objects(ctx: DashboardContext, max_age: float) -> dict[str, str]:
    """Asks every connected agent whose rows are older than ``max_age``; returns ``missing``.

    The rows of a node in ``missing`` (unless only some of its processes were late) are
    dropped: they describe a past moment and would be read as current."""
    st = ctx.state
    if ctx.hub is None:
        missing = {nid: "no agents are connected to this dashboard" for nid in st.nodes}
    else:
        missing = unreachable_nodes(ctx)
    for nid in missing:
        _forget(ctx, nid)
    if ctx.hub is None:
        return missing
    now = time.time()
    stale = [
        nid for nid in ctx.hub.connected_nodes() if now - st.objects_time.get(nid, 0) > max_age
    ]
    results = await asyncio.gather(
        *(ctx.hub.call(nid, "objects", {}, timeout=10.0) for nid in stale),
        return_exceptions=True,
    )
    for nid, res in zip(stale, results, strict=True):
        if isinstance(res, BaseException):
            missing[nid] = str(res)
            _forget(ctx, nid)
            continue
        st.set_objects(nid, res.get("rows", []))
        ctx.extra.setdefault("object_store", {})[nid] = res.get("store") or {}
        if res.get("unanswered"):
            missing[nid] = f"{res['unanswered']} processes did not answer in time"
    return missing


def _forget(ctx: DashboardContext, node_id: str) -> None:
    ctx.state.objects.pop(node_id, None)
    ctx.state.objects_time.pop(node_id, None)
    ctx.extra.get("object_store", {}).pop(node_id, None)


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_node: dict[str, dict[str, int]] = {}
    by_type: dict[str, int] = {}
    for r in rows:
        n = by_node.setdefault(r.get("node_id") or "", {"count": 0, "bytes": 0})
        n["count"] += 1
        n["bytes"] += r.get("object_size") or 0
        t = r.get("reference_type") or ""
        by_type[t] = by_type.get(t, 0) + 1
    return {"by_node": by_node, "by_reference_type": by_type}
