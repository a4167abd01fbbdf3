"""``/api/version`` and ``/api/cluster_status`` (what ``ember status`` shows)."""

from __future__ import annotations

import os
import time
from typing import Any

from ember.dashboard.app import (
    RAY_COMPAT_VERSION,
    RAY_JOBS_API_VERSION,
    VERSION,
    DashboardContext,
    get_ctx,
)
from fastapi import APIRouter, Depends

router = APIRouter(tags=["cluster"])


@router.get("/api/version")
async def version(ctx: DashboardContext = Depends(get_ctx)) -> dict[str, Any]:
    """With ``history`` true this is ``ember dashboard --history``: a stopped session,
    read-only (``stopped_at``, and in ``history_session`` what its history holds)."""
    history = ctx.extra.get("history")
    end = history["stopped_at"] if history else time.time()
    return {
        "ember_version": VERSION,
        "api": 1,
        # Ray's clients' fields: the Jobs API version and the Ray release emulated.
        "version": RAY_JOBS_API_VERSION,
        "ray_version": RAY_COMPAT_VERSION,
        "ray_commit": "",
        "session_name": os.path.basename(ctx.session_dir.rstrip("/")),
        "session_dir": ctx.session_dir,
        "started": ctx.state.started,
        "uptime_s": end - ctx.state.started,
        "history": bool(history),
        "stopped_at": history["stopped_at"] if history else None,
        "history_session": history,
    }


@router.get("/api/cluster_status")
async def cluster_status(ctx: DashboardContext = Depends(get_ctx)) -> dict[str, Any]:
    st = ctx.state
    gcs_nodes = {n["node_id"]: n for n in st.cluster.get("nodes", [])}
    total: dict[str, float] = {}
    available: dict[str, float] = {}
    for n in gcs_nodes.values():
        if n.get("state") != "ALIVE":
            continue
        for k, v in (n.get("resources_total") or {}).items():
            total[k] = total.get(k, 0.0) + v
        for k, v in (n.get("resources_available") or {}).items():
            available[k] = available.get(k, 0.0) + v
    used = {k: total[k] - available.get(k, 0.0) for k in total}
    demands: list[dict[str, Any]] = []
    for n in gcs_nodes.values():
        demands.extend(n.get("pending_demands") or [])
    alive = [nid for nid, n in st.nodes.items() if n.state == "ALIVE"]
    dead = [nid for nid, n in st.nodes.items() if n.state != "ALIVE"]
    return {
        "nodes": {"alive": alive, "dead": dead},
        "gcs_nodes": list(gcs_nodes.values()),
        "resources": {"total": total, "used": used, "available": available},
        "pending_demands": demands,
        "pending_actors": st.cluster.get("pending_actors", []),
        "placement_groups": st.cluster.get("placement_groups", []),
        "tasks": dict(st.tasks.counts["state"]),
        "actors": _count(r.get("state") for r in st.actors.values()),
        "dropped": dict(st.dropped),
        "ingested": dict(st.ingested),
        "gcs_connected": bool(ctx.gcs and ctx.gcs.connected),
        # The autoscaler's newest status record (None: none seen), for `ember status`.
        "autoscaler": st.autoscaler.record,
        "time": time.time(),
    }


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out
