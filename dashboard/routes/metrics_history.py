"""History for the Metrics page beyond the node series of ``/api/history``:

- ``/api/metrics/user_history``: the application metrics (``ember.util.metrics``) of the
  cluster, one merged reading per history period (as ``/metrics`` merges them).
- ``/api/metrics/task_rates``: per task function, how many tasks finished and failed in each
  time bucket and their mean run time (start to end), from the task table.

Buckets end at the request's time, so every bucket is whole: the live edge is not an
incomplete bucket that would read as a drop to zero."""

from __future__ import annotations

from typing import Annotated, Any

from ember.dashboard.app import DashboardContext, get_ctx
from fastapi import APIRouter, Depends, Query

router = APIRouter(tags=["metrics"])

# The scan stops after this many tasks (newest first), so a request stays bounded.
SCAN_CAP = 300_000


@router.get("/api/metrics/user_history")
async def user_history(
    window_s: Annotated[float, Query(gt=0, le=86_400)] = 1800,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    """``{"times": [t], "series": [{"key", "name", "type", "tags", "values": [v|null]}],
    "dropped_series"}`` over the last ``window_s`` seconds; a histogram's value is its mean."""
    return ctx.state.user_history.query(since=ctx.state.clock() - window_s)


@router.get("/api/metrics/task_rates")
async def task_rates(
    window_s: Annotated[float, Query(gt=0, le=3600)] = 600,
    bucket_s: Annotated[float, Query(ge=1, le=600)] = 10,
    top: Annotated[int, Query(ge=1, le=50, description="the most frequent functions")] = 8,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    """``{"bucket_s", "times": [bucket start], "functions": [{"name", "finished": [n],
    "failed": [n], "mean_duration_s": [s|null]}], "truncated"}``: the tasks that ended in each
    whole bucket of the last ``window_s`` seconds, for the ``top`` functions by count."""
    now = ctx.state.clock()
    n = max(1, int(window_s // bucket_s))
    first = now - n * bucket_s
    table = ctx.state.tasks
    pending, started, ended = (table.times[k] for k in ("t_pending", "t_start", "t_end"))
    states, names = table.cols["state"], table.cols["name"]
    per: dict[str, dict[str, list]] = {}
    scanned = 0
    truncated = False
    for slot in table.newest_slots():
        scanned += 1
        if scanned > SCAN_CAP:
            truncated = True
            break
        if pending[slot] < first - 60:  # as the throughput chart: a minute of slack
            break
        end = ended[slot]
        if not end >= first:  # also skips NaN
            continue
        state = states[slot]
        if state not in ("FINISHED", "FAILED"):
            continue
        i = min(n - 1, int((end - first) // bucket_s))
        f = per.get(names[slot] or "")
        if f is None:
            f = per[names[slot] or ""] = {
                "finished": [0] * n,
                "failed": [0] * n,
                "dur": [0.0] * n,
                "timed": [0] * n,
            }
        f["finished" if state == "FINISHED" else "failed"][i] += 1
        start = started[slot]
        if start == start:  # not NaN
            f["dur"][i] += max(0.0, end - start)
            f["timed"][i] += 1
    ranked = sorted(per.items(), key=lambda kv: -sum(kv[1]["finished"]) - sum(kv[1]["failed"]))
    return {
        "bucket_s": bucket_s,
        "times": [first + i * bucket_s for i in range(n)],
        "functions": [
            {
                "name": name,
                "finished": f["finished"],
                "failed": f["failed"],
                "mean_duration_s": [
                    d / k if k else None for d, k in zip(f["dur"], f["timed"], strict=True)
                ],
            }
            for name, f in ranked[:top]
        ],
        "truncated": truncated,
    }
