"""``/api/logs``: the log files of every node (list), and tail, follow, search and download.

The agents index their node's files (by component and worker) and send the index with their
metrics; the contents stay on the node and are read through the agent on request, in bounded
chunks. A file deleted or rotated under a follower is reported in the stream, not an error.
A name in the logs directory that is not a plain log file (a link a job placed there, which
would lead to ``/etc/passwd`` or the cluster token) is never listed by the agent and never
read: asked for anyway, it is a 403 saying why (``ember.log_files``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.routes.nodes import resolve_node
from ember.dashboard.routes.params import ListParams, json_response, list_params
from ember.dashboard.schemas import LOGS
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import Response, StreamingResponse

router = APIRouter(tags=["logs"])
CHUNK = 256 * 1024
POLL = 0.5  # seconds between reads of a followed file that has nothing new
FileName = Annotated[str, Query(min_length=1, max_length=255, description="a name from /api/logs")]
NodeId = Annotated[str, Query(min_length=1, max_length=64, description="a node id (or prefix)")]


@router.get("/api/logs", response_model=None, responses=LOGS.page_responses())
async def list_logs(
    q: ListParams = Depends(list_params), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    preds = q.predicates(LOGS.filterable)
    rows = [f for files in ctx.state.logs.values() for f in files]
    return json_response(
        q.page(
            rows,
            preds,
            default_sort="name",
        )
    )


def _hub(ctx: DashboardContext, node_id: str, name: str | None) -> str:
    """The node's full id once the node and the file (when named) are known; an unknown one
    is a 404 whether or not its agent is connected, a missing agent a 503."""
    node_id = resolve_node(ctx, node_id)
    if name is not None:
        _check_file(ctx, node_id, name)
    if ctx.hub is None:
        raise HTTPException(503, "no agents are connected to this dashboard")
    return node_id


def _check_file(ctx: DashboardContext, node_id: str, name: str) -> None:
    files = ctx.state.logs.get(node_id, [])
    if not any(f["name"] == name for f in files):
        raise HTTPException(
            404,
            f"no log file {name!r} on node {node_id[:12]}; "
            f"GET /api/logs?filter=node_id={node_id} lists them",
        )


@router.get("/api/logs/tail")
async def tail(
    node_id: NodeId,
    name: FileName,
    lines: Annotated[int, Query(ge=1, le=100_000)] = 100,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    node_id = _hub(ctx, node_id, name)
    res = await ctx.hub.call(node_id, "log_tail", {"name": name, "lines": lines}, timeout=10)
    _raise_for(res)  # listed a moment ago, deleted (404) or replaced by a link (403) since
    return res


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
    node_id = _hub(ctx, node_id, name)
    body = {"pattern": pattern, "name": name, "max_matches": max_matches}
    res = await ctx.hub.call(node_id, "log_search", body, timeout=30)
    _raise_for(res)
    return res


@router.get("/api/logs/download")
async def download(
    node_id: NodeId, name: FileName, ctx: DashboardContext = Depends(get_ctx)
) -> StreamingResponse:
    node_id = _hub(ctx, node_id, name)
    first = await ctx.hub.call(
        node_id, "log_read", {"name": name, "offset": 0, "size": CHUNK}, timeout=10
    )
    _raise_for(first)  # before the response starts: afterwards only a note in the body

    async def chunks() -> AsyncIterator[bytes]:
        # The file's identity goes with each read: a file rotated by rename is read to its end
        # under its new name; one truncated mid-download ends it, with a note saying so.
        res = first
        while True:
            if res.get("rotated") == "truncated":
                yield b"\n[ember: the file was truncated during the download]\n"
                return
            if res.get("rotated"):  # the renamed file is done; the new one is another file
                return
            data = res.get("data", "").encode("utf-8", "surrogateescape")
            if data:
                yield data
            if res.get("eof") or res.get("error"):
                if res.get("error"):
                    yield f"\n[ember: download stopped: {res['error']}]\n".encode()
                return
            body = {
                "name": name,
                "offset": res["next_offset"],
                "size": CHUNK,
                "file_id": res.get("file_id"),
                "mark": res.get("mark"),
            }
            res = await ctx.hub.call(node_id, "log_read", body, timeout=10)

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
    timeout: Annotated[
        float | None,
        Query(gt=0, le=86_400, description="end the stream after this many seconds"),
    ] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> StreamingResponse:
    """Server-sent events: ``data: {"lines": [...]}`` as the file grows; ``event: rotated``
    when it was renamed away or truncated (following goes on, no line lost); ``event: missing``
    when the file is deleted or the agent goes away (the stream keeps trying)."""
    node_id = _hub(ctx, node_id, name)
    follower = LogFollower(ctx.hub, node_id, name)
    first = await follower.start(lines)
    deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout

    async def events() -> AsyncIterator[str]:
        yield _sse({"lines": first})
        while not await request.is_disconnected():
            out, more = await follower.poll()
            for event, data in out:
                yield _sse(data, event=None if event == "lines" else event)
            left = None if deadline is None else deadline - asyncio.get_running_loop().time()
            if left is not None and left <= 0:
                return
            if not more:
                await asyncio.sleep(POLL if left is None else min(POLL, left))

    return StreamingResponse(events(), media_type="text/event-stream")


class LogFollower:
    """One file of one node, followed through its agent's ``log_read`` (``/api/logs/follow``
    and the live stream's ``log`` topic). It passes back the file's identity and mark on each
    read, so a file rotated by rename or truncated loses no line (``agent_logs``); it holds
    a last line without its newline until the line ends or the file goes quiet; it says
    ``missing`` once per outage, not on every poll."""

    def __init__(self, hub: Any, node_id: str, name: str, chunk: int = CHUNK) -> None:
        self.hub, self.node_id, self.name, self.chunk = hub, node_id, name, chunk
        self.offset = 0
        self.file_id: str | None = None
        self.mark: str | None = None
        self.partial = ""
        self.missing: str | None = None

    async def start(self, lines: int) -> list[str]:
        """The last ``lines`` lines, and the position to follow from (their end)."""
        res = await self.hub.call(
            self.node_id, "log_tail", {"name": self.name, "lines": max(lines, 1)}, timeout=10
        )
        _raise_for(res)
        self.offset = int(res.get("size") or 0)
        self.file_id, self.mark = res.get("file_id"), res.get("mark")
        return list(res.get("lines", []))[-lines:] if lines else []

    async def poll(self) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
        """One read: the ``(event, data)`` pairs to send (``lines``, ``rotated``, ``missing``)
        and whether more is waiting to be read at once."""
        body = {
            "name": self.name,
            "offset": self.offset,
            "size": self.chunk,
            "file_id": self.file_id,
            "mark": self.mark,
        }
        try:
            res = await self.hub.call(self.node_id, "log_read", body, timeout=10)
        except Exception as e:  # the agent went away: say so once, keep following
            return self._missing(str(e)), False
        if res.get("error"):
            return self._missing(str(res["error"])), False
        out: list[tuple[str, dict[str, Any]]] = []
        if self.missing is not None:
            self.missing = None
            out.append(("resumed", {"message": f"{self.name} is readable again"}))
        if res.get("rotated"):
            if self.partial:  # the old file's last line, which will get no newline now
                out.append(("lines", {"lines": [self.partial]}))
                self.partial = ""
            how = "renamed away (rotated)" if res["rotated"] == "renamed" else "truncated"
            out.append(
                ("rotated", {"message": f"{self.name} was {how}; following it from its start"})
            )
        self.offset = int(res["next_offset"])
        self.file_id = res.get("file_id", self.file_id)
        self.mark = res.get("mark", self.mark)
        data = res.get("data", "")
        parts = (self.partial + data).split("\n")
        self.partial = parts.pop()
        if not data and self.partial:  # the file is quiet: the line is as long as it gets
            parts.append(self.partial)
            self.partial = ""
        if parts:
            out.append(("lines", {"lines": [p.rstrip("\r") for p in parts]}))
        return out, not res.get("eof", True)

    def _missing(self, message: str) -> list[tuple[str, dict[str, Any]]]:
        if message == self.missing:
            return []
        self.missing = message
        return [("missing", {"message": message})]


def _raise_for(res: dict[str, Any]) -> None:
    """An agent's error answer as the HTTP error it stands for: the status the agent gave (403
    for a file it refuses to serve), else 404 (the file is gone)."""
    if res.get("error"):
        raise HTTPException(int(res.get("status") or 404), res["error"])


def _sse(data: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
