"""The live stream: node metrics, state changes (nodes, actors, task counts) and error events.
New lines of a log file stream from ``/api/logs/follow``.

``/api/stream`` is a WebSocket; ``/api/stream/sse`` the same as server-sent events (for
proxies that do not pass WebSockets). ``?topics=node_metrics,actor`` narrows it. A slow client
loses its oldest messages and gets ``{"type": "dropped", "count": n}``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated

from ember.dashboard.app import DashboardContext, get_ctx
from fastapi import APIRouter, Depends, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse

router = APIRouter(tags=["stream"])
TOPICS = frozenset({"node_metrics", "node", "actor", "tasks", "event"})


def _topics(raw: str | None) -> frozenset[str] | None:
    if not raw:
        return None
    wanted = frozenset(t.strip() for t in raw.split(",") if t.strip())
    unknown = wanted - TOPICS
    if unknown:
        from ember.dashboard.query import QueryError

        raise QueryError("topics", f"unknown topics {sorted(unknown)}; known: {sorted(TOPICS)}")
    return wanted


@router.websocket("/api/stream")
async def stream_ws(websocket: WebSocket, topics: str | None = None) -> None:
    ctx: DashboardContext = websocket.app.state.ctx
    try:
        wanted = _topics(topics)
    except ValueError as e:
        await websocket.close(code=4422, reason=str(e)[:120])
        return
    await websocket.accept()
    sub = ctx.state.pubsub.subscribe(wanted)
    try:
        await websocket.send_json({"type": "hello", "topics": sorted(wanted or TOPICS)})
        while True:
            batch = await sub.next_batch(15.0)
            await websocket.send_json({"type": "batch", "messages": batch})
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        ctx.state.pubsub.unsubscribe(sub)


@router.get("/api/stream/sse")
async def stream_sse(
    request: Request,
    topics: Annotated[str | None, Query(max_length=200, description="comma-separated")] = None,
    timeout: Annotated[
        float | None,
        Query(gt=0, le=86_400, description="end the stream after this many seconds"),
    ] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> StreamingResponse:
    wanted = _topics(topics)
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout

    async def events() -> AsyncIterator[str]:
        sub = ctx.state.pubsub.subscribe(wanted)
        try:
            yield ": connected\n\n"
            while not await request.is_disconnected():
                left = 5.0 if deadline is None else min(5.0, deadline - loop.time())
                if left <= 0:
                    return
                for msg in await sub.next_batch(left):
                    yield f"event: {msg['type']}\ndata: {json.dumps(msg)}\n\n"
                yield ": keep-alive\n\n"
        finally:
            ctx.state.pubsub.unsubscribe(sub)

    return StreamingResponse(events(), media_type="text/event-stream")
