"""``GET /api/autoscaler/status``: the autoscaler's newest status record with the figures the
Config view shows (each node type's min/current/max, pending launches, idle timers, launch
failures, the resources being launched) and the cluster's size over time."""

from __future__ import annotations

from typing import Any

from ember.dashboard.app import DashboardContext, get_ctx
from fastapi import APIRouter, Depends

router = APIRouter(tags=["autoscaler"])


@router.get("/api/autoscaler/status")
async def autoscaler_status(ctx: DashboardContext = Depends(get_ctx)) -> dict[str, Any]:
    """``present`` false: no autoscaler has written a record in this session (the cluster
    was started by hand). ``fresh`` false: the newest record is older than
    ``stale_after_s`` (the autoscaler stopped). ``now`` is the time the figures are computed
    at (a stopped session's end, in history mode), for the page's timers."""
    st = ctx.state
    now = st.clock()
    return {"now": now, **st.autoscaler.status(now)}
