"""Endpoints the browser app needs beyond the shared list API.

- ``/api/frontend/actors``: the Actors page's list. Substring search (the shared filters are
  exact), filters by state, node, class and job, the creator tree flattened in depth-first order with each row's ``depth`` and
  ``num_children`` (so the page can page and virtualise a tree of 20,000 actors like a list),
  and ``infeasible`` set on pending actors no node can ever hold.
- ``/api/frontend/nodes``: the node rows with their latest metrics sample, in one request
  (the Machines page shows disk and network per node; ``/api/nodes/{id}`` per row would be N).
- ``/api/frontend/throughput``: finished and failed tasks per time bucket, for the Overview's
  throughput chart (the metric history has no task series).

They read the same ``DashboardState`` as every router. The only state of their own is a cache
of the Actors page's ordered views (a few, keyed by ``DashboardState.actors_version`` and the
query), so scrolling a 20,000-actor tree does not rebuild the tree for every page of rows.
"""

from __future__ import annotations

import os
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.query import MAX_LIMIT, check_sort, page
from ember.dashboard.routes.objects import refresh_objects
from ember.dashboard.schemas import ACTORS
from fastapi import APIRouter, Depends, Query

router = APIRouter(tags=["frontend"])

# The scan behind the throughput chart stops after this many records (newest first), so the
# request stays bounded however many tasks the table holds.
THROUGHPUT_SCAN_CAP = 300_000
_SEARCHED = ("actor_id", "class_name", "name", "title", "node_id", "pid", "job_id")


def is_infeasible(row: dict[str, Any]) -> bool:
    """A pending actor whose reason says no node can ever hold it (the GCS's wording)."""
    reason = (row.get("pending_reason") or "").lower()
    return row.get("state") == "PENDING" and "infeasible" in reason


def _matches(row: dict[str, Any], needle: str) -> bool:
    return any(needle in str(row.get(k) or "").lower() for k in _SEARCHED)


@router.get("/api/frontend/actors")
async def frontend_actors(
    q: Annotated[str, Query(max_length=200, description="substring of id, class, name, node")] = "",
    state: Annotated[
        str, Query(max_length=20, description="ALIVE, PENDING, RESTARTING, DEAD")
    ] = "",
    pid: Annotated[int | None, Query(ge=1, le=2**22)] = None,
    node_id: Annotated[str, Query(max_length=64, description="a node id or its prefix")] = "",
    class_name: Annotated[str, Query(max_length=200, description="exact class name")] = "",
    job_id: Annotated[str, Query(max_length=64, description="a job id or its prefix")] = "",
    view: Annotated[
        Literal["list", "tree"], Query(description="flat list or creator tree")
    ] = "list",
    collapsed: Annotated[
        str, Query(max_length=20_000, description="tree: comma-separated ids")
    ] = "",
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    offset: Annotated[int, Query(ge=0, le=100_000_000)] = 0,
    sort_by: Annotated[str | None, Query(max_length=64)] = None,
    descending: bool = False,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    """One page of the actors matching every filter (applied before the limit), with the
    whole table's ``counts`` by state and its ``classes`` and ``jobs`` (the filters' choices)."""
    check_sort(sort_by, ACTORS.filterable)
    st = ctx.state
    needle = q.strip().lower()
    filters = (needle, state, pid, node_id, class_name, job_id)
    # Call counts change with task events, not with the actor table: a view sorted by them is
    # reused for at most a second (the page refreshes live at that pace anyway).
    clock = int(time.monotonic()) if sort_by in _CALL_COUNTS else 0
    tree_collapsed = collapsed if view == "tree" else ""
    key = (st.actors_version, clock, view, filters, tree_collapsed, sort_by, descending)
    views: OrderedDict[tuple, _ActorView] = ctx.extra.setdefault(
        "frontend_actor_views", OrderedDict()
    )
    built = views.get(key)
    if built is None:
        # The summary is the whole table's: one per table version, whatever the filters.
        summary = ctx.extra.get("frontend_actor_summary")
        if summary is None or summary[0] != st.actors_version:
            summary = (st.actors_version, _summary(list(st.actors.values())))
            ctx.extra["frontend_actor_summary"] = summary
        built = _build_actor_view(
            st, view, filters, tree_collapsed, sort_by, descending, summary[1]
        )
        views[key] = built
        while len(views) > _VIEW_CACHE:
            views.popitem(last=False)
    else:
        views.move_to_end(key)

    def render(r: dict[str, Any], depth: int | None) -> dict[str, Any]:
        out = st.actor_row(r["actor_id"])
        wid = r.get("worker_id")
        out["num_children"] = built.summary.created.get(wid, 0) if wid else 0
        out["infeasible"] = is_infeasible(out)
        if depth is not None:  # the tree: indentation, and whether the row itself matched
            out["depth"] = depth
            out["matches"] = built.keep(r)
        return out

    return {
        "total": len(built.rows),
        "offset": offset,
        "limit": limit,
        "items": [render(r, d) for r, d in built.rows[offset : offset + limit]],
        "counts": built.summary.counts,
        "classes": built.summary.classes,
        "jobs": built.summary.jobs,
    }


# Views kept per dashboard: a few filters and sorts in use at once (each holds one list of
# references to the table's rows, not copies).
_VIEW_CACHE = 8
_CALL_COUNTS = {"executed_calls", "pending_calls"}
# The class and job choices sent with each page: the most common ones.
_CHOICES = 200


@dataclass
class _Summary:
    counts: dict[str, int]  # {state: n}
    created: Counter  # {worker id: actors it created}
    classes: dict[str, int]  # {class name: n}, the most common
    jobs: dict[str, int]  # {job id: n}, the most common


@dataclass
class _ActorView:
    """The matching actors in display order, as ``(row, depth)`` (depth None in the list)."""

    rows: list[tuple[dict[str, Any], int | None]]
    keep: Callable[[dict[str, Any]], bool]
    summary: _Summary


def _summary(rows: list[dict[str, Any]]) -> _Summary:
    return _Summary(
        counts=dict(Counter(r.get("state") or "" for r in rows)),
        # An actor's children are its worker's creations.
        created=Counter(r.get("owner_worker_id") for r in rows),
        classes=dict(Counter(r.get("class_name") or "" for r in rows).most_common(_CHOICES)),
        jobs=dict(Counter(r.get("job_id") or "" for r in rows).most_common(_CHOICES)),
    )


def _build_actor_view(
    st: Any,
    view: str,
    filters: tuple[str, str, int | None, str, str, str],
    collapsed: str,
    sort_by: str | None,
    descending: bool,
    summary: _Summary,
) -> _ActorView:
    needle, state, pid, node_id, class_name, job_id = filters
    # The stored rows, not st.actor_row() of each: 20,000 copies cost more than the page. The
    # creator link and call counts are computed for the page's rows only (and for every row
    # when the sort needs them).
    rows = list(st.actors.values())
    if sort_by in _COMPUTED:
        rows = [st.actor_row(r["actor_id"]) for r in rows]

    def keep(r: dict[str, Any]) -> bool:
        return (
            (not needle or _matches(r, needle))
            and (not state or r.get("state") == state)
            and (pid is None or r.get("pid") == pid)
            and (not node_id or (r.get("node_id") or "").startswith(node_id))
            and (not class_name or r.get("class_name") == class_name)
            and (not job_id or (r.get("job_id") or "").startswith(job_id))
        )

    filtered = any(f not in ("", None) for f in filters)
    if view == "list":
        out = page(
            [r for r in rows if keep(r)] if filtered else rows,
            sort_by=sort_by,
            descending=descending,
            limit=len(rows) or 1,
        )
        flat: list[tuple[dict[str, Any], int | None]] = [(r, None) for r in out["items"]]
    else:
        by_worker = {r["worker_id"]: r["actor_id"] for r in rows if r.get("worker_id")}
        creator = {r["actor_id"]: by_worker.get(r.get("owner_worker_id") or "") for r in rows}
        children: dict[str, list[dict[str, Any]]] = {}  # {creator actor id or "": [rows]}
        for r in rows:
            children.setdefault(creator[r["actor_id"]] or "", []).append(r)
        flat = list(
            _tree_order(
                rows,
                children,
                creator,
                keep if filtered else None,
                set(filter(None, collapsed.split(","))),
                sort_by,
                descending,
            )
        )
    return _ActorView(rows=flat, keep=keep, summary=summary)


_COMPUTED = {"executed_calls", "pending_calls", "creator_actor_id"}


def _tree_order(
    rows: list[dict[str, Any]],
    children: dict[str, list[dict[str, Any]]],
    creator: dict[str, str | None],
    keep: Any,  # the filter, or None when nothing is filtered
    collapsed: set[str],
    sort_by: str | None,
    descending: bool,
) -> list[tuple[dict[str, Any], int]]:
    """Depth-first over the creator tree, as ``(row, depth)``; a row
    stays when it or a descendant matches (so a match is shown with its ancestors), and a
    collapsed row hides its descendants."""
    # An actor whose creator is gone from the table (evicted) is shown as a root.
    roots = [r for r in rows if not creator[r["actor_id"]] or creator[r["actor_id"]] not in creator]
    if sort_by:
        key = _key(sort_by)
        for lst in [roots, *children.values()]:
            lst.sort(key=key, reverse=descending)

    visible: dict[str, bool] = {}

    def any_match(r: dict[str, Any]) -> bool:
        if keep is None:  # no filter: every row shows
            return True
        # Iterative post-order so a 20,000-deep chain cannot overflow the stack.
        stack = [(r, False)]
        while stack:
            node, done = stack.pop()
            aid = node["actor_id"]
            if aid in visible:
                continue
            kids = children.get(aid, ())
            if done:
                visible[aid] = keep(node) or any(visible.get(k["actor_id"]) for k in kids)
            else:
                stack.append((node, True))
                stack.extend((k, False) for k in kids if k["actor_id"] not in visible)
        return visible[r["actor_id"]]

    flat: list[tuple[dict[str, Any], int]] = []
    stack = [(r, 0) for r in reversed(roots)]
    while stack:
        r, depth = stack.pop()
        if not any_match(r):
            continue
        flat.append((r, depth))
        if r["actor_id"] not in collapsed:
            stack.extend((k, depth + 1) for k in reversed(children.get(r["actor_id"], ())))
    return flat


def _key(field: str) -> Any:
    def key(row: dict[str, Any]) -> tuple:
        v = row.get(field)
        if v is None:
            return (0, "")
        return (1, v) if isinstance(v, int | float) else (2, str(v))

    return key


@router.get("/api/frontend/nodes")
async def frontend_nodes(
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 1000,
    offset: Annotated[int, Query(ge=0, le=100_000_000)] = 0,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    st = ctx.state
    rows = []
    for nid in list(st.nodes):
        row = st.node_row(nid)
        row["metrics"] = st.nodes[nid].metrics
        rows.append(row)
    rows.sort(key=lambda r: (not r["is_head"], r.get("state") != "ALIVE", r.get("hostname") or ""))
    return {
        "total": len(rows),
        "offset": offset,
        "limit": limit,
        "items": rows[offset : offset + limit],
    }


@router.get("/api/frontend/throughput")
async def throughput(
    window_s: Annotated[float, Query(gt=0, le=3600)] = 600,
    bucket_s: Annotated[float, Query(ge=1, le=600)] = 5,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    """``{"bucket_s", "times": [bucket start], "finished": [n], "failed": [n], "scanned",
    "truncated"}``: tasks that ended in each bucket of the last ``window_s`` seconds."""
    now = ctx.state.clock()
    # Whole buckets ending now: a last bucket starting now would hold nothing yet and draw
    # the curve down to 0 at the live edge.
    n = max(1, int(window_s // bucket_s))
    first = now - n * bucket_s
    start = first
    finished = [0] * n
    failed = [0] * n
    scanned = 0
    truncated = False
    # Newest first by submission; a task submitted long before the window ended before it
    # too, except the rare long runner (a minute of slack covers most). The table is
    # columnar: read its time and state columns by slot (NaN: not known yet).
    table = ctx.state.tasks
    pending, ended, states = table.times["t_pending"], table.times["t_end"], table.cols["state"]
    for slot in table.newest_slots():
        scanned += 1
        if scanned > THROUGHPUT_SCAN_CAP:
            truncated = True
            break
        if pending[slot] < start - 60:  # False for NaN: an unknown time does not stop the scan
            break
        end = ended[slot]
        if not end >= first:  # also skips NaN
            continue
        i = min(n - 1, int((end - first) // bucket_s))
        if states[slot] == "FAILED":
            failed[i] += 1
        elif states[slot] == "FINISHED":
            finished[i] += 1
    return {
        "bucket_s": bucket_s,
        "times": [first + i * bucket_s for i in range(n)],
        "finished": finished,
        "failed": failed,
        "scanned": min(scanned, THROUGHPUT_SCAN_CAP),
        "truncated": truncated,
    }


@router.get("/api/frontend/object_groups")
async def object_groups(
    by: Annotated[
        Literal["node_id", "pid"], Query(description="group by node or by process")
    ] = "node_id",
    max_age: Annotated[float, Query(ge=0, le=3600, description="reuse rows this fresh (s)")] = 2.0,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    """The Memory page's groups: ``{"by", "groups": [{"key", "node_id", "pid", "count",
    "bytes", "types": {reference type: n}}], "missing", "store": {node_id: {used, capacity,
    objects}}}``, largest first. The rows are the ones ``/api/objects`` serves."""
    missing = await refresh_objects(ctx, max_age)
    st = ctx.state
    groups: dict[str, dict[str, Any]] = {}
    for node_id, rows in st.objects.items():
        for r in rows:
            pid = r.get("pid") if by == "pid" else None
            key = f"{node_id}/{pid}" if by == "pid" else node_id
            g = groups.get(key)
            if g is None:
                g = groups[key] = {
                    "key": key,
                    "node_id": node_id,
                    "pid": pid,
                    "count": 0,
                    "bytes": 0,
                    "types": {},
                }
            g["count"] += 1
            g["bytes"] += max(r.get("object_size") or 0, 0)  # -1: size not known (a handle)
            t = r.get("reference_type") or ""
            g["types"][t] = g["types"].get(t, 0) + 1
    store = {
        nid: {
            "used": n.metrics.get("object_store_used_bytes"),
            "capacity": n.metrics.get("object_store_capacity_bytes"),
            "objects": n.metrics.get("object_store_objects"),
            "spilled": n.metrics.get("object_store_spilled_bytes"),
            "spilled_objects": n.metrics.get("object_store_spilled_objects"),
            "restored": n.metrics.get("object_store_restored_bytes_total"),
        }
        for nid, n in st.nodes.items()
    }
    ordered = sorted(groups.values(), key=lambda g: (-g["bytes"], -g["count"], g["key"]))
    return {"by": by, "groups": ordered, "missing": missing, "store": store}


@router.get("/api/frontend/links")
async def links() -> dict[str, str | None]:
    """Where the Metrics page links to: ``EMBER_PROMETHEUS_HOST`` and ``EMBER_GRAFANA_HOST``
    (Ray's ``RAY_PROMETHEUS_HOST`` / ``RAY_GRAFANA_HOST``), as set for the dashboard process;
    null when not configured. Only http(s) URLs are passed on."""
    out: dict[str, str | None] = {}
    for key, env in (
        ("prometheus_url", "EMBER_PROMETHEUS_HOST"),
        ("grafana_url", "EMBER_GRAFANA_HOST"),
    ):
        url = os.environ.get(env, "").strip()
        out[key] = url if url.startswith(("http://", "https://")) else None
    return out
