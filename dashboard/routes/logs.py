"""``/api/logs``: the log files of every node (list), and tail, follow, search and download.

The agents index their node's files (by component and worker) and send the index with their
metrics; the contents stay on the node and are read through the agent on request, in bounded
chunks. A file deleted or rotated under a follower is reported in the stream, not an error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.query import page
from ember.dashboard.routes.nodes import resolve_node
from ember.dashboard.routes.params import ListParams, list_params
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import StreamingResponse

router = APIRouter(tags=["logs"])
LOG_FIELDS = ("node_id", "name", "component", "pid", "worker_id", "size", "mtime", "stream")
CHUNK = 256 * 1024
FileName = Annotated[str, Query(min_length=1, max_length=255, description="a name from /api/logs")]
NodeId = Annotated[str, Query(min_length=1, max_length=64, description="a node id (or prefix)")]


@router.get("/api/logs")
async def list_logs(
    q: ListParams = Depends(list_params), ctx: DashboardContext = Depends(get_ctx)
) -> dict[str, Any]:
    preds = q.predicates(LOG_FIELDS)
    rows = [f for files in ctx.state.logs.values() for f in files]
    return page(
        rows,
        predicates=preds,
        sort_by=q.sort_by or "name",
        descending=q.descending,
        limit=q.limit,
        offset=q.offset,
    )


def _hub(ctx: DashboardContext, node_id: str) -> str:
    node_id = resolve_node(ctx, node_id)
    if ctx.hub is None:
        raise HTTPException(503, "no agents are connected to this dashboard")
    return node_id


def _check_file(ctx: DashboardContext, node_id: str, name: str) -> None:
    files = ctx.state.logs.get(node_id, [])
    if not any(f["name"] == name for f in files):
        raise HTTPException(
            404, f"no log file {name!r} on node {node_id[:12]}; GET /api/logs?filter=node_id=..."
        )


@router.get("/api/logs/tail")
async def tail(
    node_id: NodeId,
    name: FileName,
    lines: Annotated[int, Query(ge=1, le=100_000)] = 100,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    node_id = _hub(ctx, node_id)
    _check_file(ctx, node_id, name)
    return await ctx.hub.call(node_id, "log_tail", {"name": name, "lines": lines}, timeout=10)


@router.get("/api/logs/search")
async def search(
    node_id: NodeId,
    pattern: Annotated[str, Query(min_length=1, max_length=200, description="text to find")],
    name: Annotated[
        str | None, Query(max_length=255, description="one file; all if absent")
    ] = None,
    max_matches: Annotated[int, Query(ge=1, le=10_000)] = 500,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    node_id = _hub(ctx, node_id)
    if name is not None:
        _check_file(ctx, node_id, name)
    body = {"pattern": pattern, "name": name, "max_matches": max_matches}
    return await ctx.hub.call(node_id, "log_search", body, timeout=30)


@router.get("/api/logs/download")
async def download(
    node_id: NodeId, name: FileName, ctx: DashboardContext = Depends(get_ctx)
) -> StreamingResponse:
    node_id = _hub(ctx, node_id)
    _check_file(ctx, node_id, name)
    first = await ctx.hub.call(
        node_id, "log_read", {"name": name, "offset": 0, "size": CHUNK}, timeout=10
    )

    async def chunks() -> AsyncIterator[bytes]:
        res, offset = first, 0
        while True:
            data = res.get("data", "").encode("utf-8", "surrogateescape")
            if data:
                yield data
            offset = res["next_offset"]
            if res.get("eof") or res.get("error"):
                if res.get("error"):
                    yield f"\n[ember: download stopped: {res['error']}]\n".encode()
                return
            res = await ctx.hub.call(
                node_id, "log_read", {"name": name, "offset": offset, "size": CHUNK}, timeout=10
            )

    return StreamingResponse(
        chunks(),
        media_type="text/plain; charset=utf-8",
        headers={"content-disposition": f'attachment; filename="{_safe(name)}"'},
    )


@router.get("/api/logs/follow")
async def follow(
    request: Request,
    node_id: NodeId,
    name: FileName,
    lines: Annotated[int, Query(ge=0, le=10_000, description="start with the last N lines")] = 50,
    ctx: DashboardContext = Depends(get_ctx),
) -> StreamingResponse:
    """Server-sent events: ``data: {"lines": [...]}`` as the file grows; ``event: missing``
    when the file is deleted or the agent goes away (the stream keeps trying)."""
    node_id = _hub(ctx, node_id)
    _check_file(ctx, node_id, name)
    start = await ctx.hub.call(node_id, "log_tail", {"name": name, "lines": lines}, timeout=10)

    async def events() -> AsyncIterator[str]:
        yield _sse({"lines": start.get("lines", [])})
        offset = start.get("size", 0)
        while not await request.is_disconnected():
            await asyncio.sleep(0.5)
            try:
                res = await ctx.hub.call(
                    node_id,
                    "log_read",
                    {"name": name, "offset": offset, "size": CHUNK},
                    timeout=10,
                )
            except Exception as e:  # the agent went away: say so, keep the stream
                yield _sse({"message": str(e)}, event="missing")
                continue
            if res.get("error"):
                yield _sse({"message": res["error"]}, event="missing")
                continue
            if res.get("truncated"):
                yield _sse({"message": "the file was truncated or rotated"}, event="rotated")
            offset = res["next_offset"]
            text = res.get("data", "")
            if text:
                yield _sse({"lines": text.splitlines()})

    return StreamingResponse(events(), media_type="text/event-stream")


def _sse(data: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
