"""The live stream: node metrics, state changes (nodes, actors, task counts), error events and
new lines of the log files a client names.

``/api/stream`` is a WebSocket; ``/api/stream/sse`` the same as server-sent events (for
proxies that do not pass WebSockets). ``?topics=node_metrics,actor`` narrows it. A slow client
loses its oldest messages and gets ``{"type": "dropped", "count": n}``.

Log lines (topic ``log``): the client names files with ``log_node`` (a node id or prefix),
``log_name`` (repeatable) and/or ``log_pid`` (every live file of that process), and
``log_lines`` (start with the last N lines). The dashboard follows each file through its
agent with the same ``LogFollower`` as ``/api/logs/follow`` (rotation loses no line) and sends
``{"type": "log", "node_id", "name", "event": "lines", "lines": [...]}``, or ``event``
``rotated`` / ``missing`` / ``resumed`` with a ``message``; ``following`` (no more) once a
file's position is taken: lines written after it are all sent. Bounded: at most
``MAX_LOG_FILES`` files per client, reads of ``LOG_CHUNK`` bytes, and a file's follower pauses
while the client's queue is half full, so a slow client costs memory for at most its queue;
the followers stop when the client goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.pubsub import Subscriber
from ember.dashboard.query import QueryError
from ember.dashboard.routes.logs import POLL, LogFollower
from ember.dashboard.routes.nodes import resolve_node
from fastapi import (
    APIRouter,
    Depends,
    HTTPException,
    Query,
    Request,
    WebSocket,
    WebSocketDisconnect,
)
from fastapi.responses import StreamingResponse

router = APIRouter(tags=["stream"])
TOPICS = frozenset({"node_metrics", "node", "actor", "tasks", "event", "log"})
MAX_LOG_FILES = 16
LOG_CHUNK = 64 * 1024
# Live log followers of every client, for /api/stream/stats (and the test that checks a
# client's followers stop when it goes).
_followers: set[asyncio.Task] = set()


def _topics(raw: str | None) -> frozenset[str] | None:
    if not raw:
        return None
    wanted = frozenset(t.strip() for t in raw.split(",") if t.strip())
    unknown = wanted - TOPICS
    if unknown:
        raise QueryError("topics", f"unknown topics {sorted(unknown)}; known: {sorted(TOPICS)}")
    return wanted


def log_targets(
    ctx: DashboardContext, node: str | None, names: list[str] | None, pid: int | None
) -> list[tuple[str, str]]:
    """The ``(node_id, file name)`` pairs a client named; 404 naming what matches nothing,
    422 past ``MAX_LOG_FILES``."""
    if node is None and not names and pid is None:
        return []
    nodes = [resolve_node(ctx, node)] if node else list(ctx.state.logs)
    files = [(nid, f) for nid in nodes for f in ctx.state.logs.get(nid, [])]
    live = [(nid, f) for nid, f in files if not f.get("rotated")]  # rotated files do not grow
    if pid is not None:
        live = [(nid, f) for nid, f in live if f.get("pid") == pid]
        if not live:
            where = f" on node {nodes[0][:12]}" if node else ""
            raise HTTPException(404, f"no log file of pid {pid}{where}; GET /api/logs")
    out: list[tuple[str, str]] = []
    for name in names or ["*"]:
        hits = [(nid, f["name"]) for nid, f in live if fnmatch.fnmatchcase(f["name"], name)]
        if not hits:
            raise HTTPException(404, f"no log file matches log_name={name!r}; GET /api/logs")
        out.extend(h for h in hits if h not in out)
    if len(out) > MAX_LOG_FILES:
        raise QueryError(
            "log_name",
            f"{len(out)} log files match; a client may follow at most {MAX_LOG_FILES}: "
            "narrow it with log_node, log_name or log_pid",
        )
    return out


def _start_followers(
    ctx: DashboardContext, sub: Subscriber, targets: list[tuple[str, str]], lines: int
) -> list[asyncio.Task]:
    tasks = [
        asyncio.ensure_future(_follow_into(ctx, sub, nid, name, lines)) for nid, name in targets
    ]
    _followers.update(tasks)
    for t in tasks:
        t.add_done_callback(_followers.discard)
    return tasks


async def _stop_followers(tasks: list[asyncio.Task]) -> None:
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t


async def _follow_into(
    ctx: DashboardContext, sub: Subscriber, node_id: str, name: str, lines: int
) -> None:
    follower = LogFollower(ctx.hub, node_id, name, chunk=LOG_CHUNK)
    head = {"type": "log", "node_id": node_id, "name": name}
    said = None
    while True:  # until the file's start is readable (its agent may be away for a while)
        try:
            first = await follower.start(lines)
            break
        except Exception as e:
            message = str(getattr(e, "detail", None) or e)
            if message != said:  # once per reason, not every retry
                sub.push({**head, "event": "missing", "message": message})
                said = message
            await asyncio.sleep(5.0)
    # From here on no line of the file is missed: a client may write and expect to see it.
    sub.push({**head, "event": "following"})
    if first:
        sub.push({**head, "event": "lines", "lines": first})
    while True:
        # Backpressure: the file is the buffer while the client is slow to read.
        while len(sub.queue) >= max(sub.maxlen // 2, 1):
            await asyncio.sleep(POLL)
        out, more = await follower.poll()
        for event, data in out:
            sub.push({**head, "event": event, **data})
        if not more:
            await asyncio.sleep(POLL)


def _hello(wanted: frozenset[str] | None, targets: list[tuple[str, str]]) -> dict[str, Any]:
    msg: dict[str, Any] = {"type": "hello", "topics": sorted(wanted or TOPICS)}
    if targets:
        msg["logs"] = [{"node_id": nid, "name": name} for nid, name in targets]
    return msg


def _with_log(wanted: frozenset[str] | None, targets: list[tuple[str, str]]) -> Any:
    return wanted | {"log"} if wanted is not None and targets else wanted


@router.websocket("/api/stream")
async def stream_ws(
    websocket: WebSocket,
    topics: str | None = None,
    log_node: str | None = None,
    log_name: Annotated[list[str] | None, Query()] = None,
    log_pid: int | None = None,
    log_lines: int = 0,
) -> None:
    ctx: DashboardContext = websocket.app.state.ctx
    try:
        wanted = _topics(topics)
        targets = log_targets(ctx, log_node, log_name, log_pid)
        if targets and ctx.hub is None:
            raise HTTPException(503, "no agents are connected to this dashboard")
        if not 0 <= log_lines <= 10_000:
            raise QueryError("log_lines", "log_lines must be between 0 and 10000")
    except HTTPException as e:
        await websocket.close(code=4000 + e.status_code, reason=str(e.detail)[:120])
        return
    except ValueError as e:
        await websocket.close(code=4422, reason=str(e)[:120])
        return
    wanted = _with_log(wanted, targets)
    await websocket.accept()
    sub = ctx.state.pubsub.subscribe(wanted)
    tasks = _start_followers(ctx, sub, targets, log_lines)
    try:
        await websocket.send_json(_hello(wanted, targets))
        while True:
            batch = await sub.next_batch(15.0)
            await websocket.send_json({"type": "batch", "messages": batch})
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        ctx.state.pubsub.unsubscribe(sub)
        await _stop_followers(tasks)


@router.get("/api/stream/sse")
async def stream_sse(
    request: Request,
    topics: Annotated[str | None, Query(max_length=200, description="comma-separated")] = None,
    timeout: Annotated[
        float | None,
        Query(gt=0, le=86_400, description="end the stream after this many seconds"),
    ] = None,
    log_node: Annotated[
        str | None, Query(min_length=1, max_length=64, description="log files of this node")
    ] = None,
    log_name: Annotated[
        list[str] | None,
        Query(max_length=255, description="log file names or globs to follow (repeatable)"),
    ] = None,
    log_pid: Annotated[
        int | None, Query(ge=1, le=2**22, description="follow this process's log files")
    ] = None,
    log_lines: Annotated[
        int, Query(ge=0, le=10_000, description="start each file with its last N lines")
    ] = 0,
    ctx: DashboardContext = Depends(get_ctx),
) -> StreamingResponse:
    wanted = _topics(topics)
    targets = log_targets(ctx, log_node, log_name, log_pid)
    if targets and ctx.hub is None:
        raise HTTPException(503, "no agents are connected to this dashboard")
    wanted = _with_log(wanted, targets)
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout

    async def events() -> AsyncIterator[str]:
        sub = ctx.state.pubsub.subscribe(wanted)
        tasks = _start_followers(ctx, sub, targets, log_lines)
        try:
            yield ": connected\n\n"
            if targets:  # which files it follows (a plain stream starts as it always has)
                yield f"event: hello\ndata: {json.dumps(_hello(wanted, targets))}\n\n"
            while not await request.is_disconnected():
                left = 5.0 if deadline is None else min(5.0, deadline - loop.time())
                if left <= 0:
                    return
                for msg in await sub.next_batch(left):
                    yield f"event: {msg['type']}\ndata: {json.dumps(msg)}\n\n"
                yield ": keep-alive\n\n"
        finally:
            ctx.state.pubsub.unsubscribe(sub)
            await _stop_followers(tasks)

    return StreamingResponse(events(), media_type="text/event-stream")


@router.get("/api/stream/stats")
async def stream_stats(ctx: DashboardContext = Depends(get_ctx)) -> dict[str, Any]:
    """The live stream's own cost: clients connected and log files followed for them."""
    return {
        "subscribers": len(ctx.state.pubsub.subscribers),
        "log_followers": len(_followers),
    }
