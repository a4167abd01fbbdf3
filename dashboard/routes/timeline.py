"""``GET /api/timeline``: the cluster's tasks as a Chrome trace, streamed from the task table and
the timeline store (``ember.trace``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.autoscaler.view import TIMELINE_ROW
from ember.dashboard.routes.nodes import resolve_node
from ember.trace.store import Filters
from ember.trace.writer import generate
from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

router = APIRouter(tags=["timeline"])


@router.get(
    "/api/timeline",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/json": {}}, "description": "Chrome trace"}},
)
async def timeline(
    job_id: Annotated[str | None, Query(max_length=64, description="only this job")] = None,
    node_id: Annotated[str | None, Query(max_length=64, description="only this node")] = None,
    since: Annotated[
        float | None, Query(ge=0, description="only tasks ending after this epoch time")
    ] = None,
    until: Annotated[
        float | None, Query(ge=0, description="only tasks starting before this epoch time")
    ] = None,
    last_seconds: Annotated[
        float | None, Query(gt=0, le=10**9, description="only the last N seconds")
    ] = None,
    waits: Annotated[
        bool,
        Query(description="include each task's wait for resources (2 of a task's 3 events)"),
    ] = True,
    ctx: DashboardContext = Depends(get_ctx),
) -> StreamingResponse:
    """The cluster's tasks as a Chrome trace, streamed (no cap on the number of tasks;
    the dashboard keeps the newest ``max_tasks``, and ``dropped.tasks`` in the trace's
    metadata counts the older ones it evicted). ``node_id`` takes a unique prefix."""
    st = ctx.state
    if node_id:
        node_id = resolve_node(ctx, node_id)
    if last_seconds is not None:
        since = max(since or 0.0, ctx.state.clock() - last_seconds)
    filters = Filters(job_id=job_id, node_id=node_id, since=since, until=until, waits=waits)
    # The tasks oldest first, a block at a time: the window's blocks only, copied as they
    # go, so the response costs the tasks in the window and holds a bounded number.
    scan = st.tasks.scan(since=since, until=until, job_id=job_id, node_id=node_id)

    def losses() -> dict[str, int]:
        return {
            "tasks": scan.evicted,
            "tasks_during_export": scan.overwritten,
        }

    labels = {nid: f"node {n.info.get('node_ip', '?')} {nid[:8]}" for nid, n in st.nodes.items()}
    labels[TIMELINE_ROW] = "autoscaler: scaling decisions"
    drivers = {
        w["pid"]
        for w in st.all_workers()
        if w.get("kind") == "driver" and isinstance(w.get("pid"), int)
    }
    chunks = generate(
        scan,
        st.timeline,
        filters,
        node_labels=labels,
        driver_pids=drivers,
        table_losses=losses,
        info={"max_tasks": st.tasks.cap},
    )

    async def body() -> AsyncIterator[bytes]:
        for text in chunks:
            yield text.encode()
            await asyncio.sleep(0)  # let the loop serve others between chunks

    return StreamingResponse(
        body(),
        media_type="application/json",
        headers={"Content-Disposition": 'attachment; filename="ember-timeline.json"'},
    )
