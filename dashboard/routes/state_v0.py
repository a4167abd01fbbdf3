"""Ray's state API, ``/api/v0/...``, so Ray's own clients work against an Ember cluster:
``ray list actors|tasks|nodes|workers|objects|jobs|placement-groups --address URL``,
``ray get``, ``ray summary tasks|actors|objects`` and ``ray.util.state.list_*``.

Every reply is Ray's envelope, ``{"result": true, "msg": "", "data": {"result": ...}}``; a
request refused (an unknown filter column, a bad predicate or value, a malformed parameter)
is ``400`` with ``{"result": false, "msg": ...}`` saying why. The rows come from the
dashboard's own state (``ray_state_rows``); the query's filters run before its limit
(``ray_state_query``).
"""

from __future__ import annotations

import fnmatch
from itertools import islice
from typing import Annotated, Any

from ember.dashboard import job_records as jr
from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.job_manager import JobError, job_manager
from ember.dashboard.ray_state_query import (
    DEFAULT_TIMEOUT,
    Listing,
    StateApiError,
    StateQuery,
    error,
    ok,
    parse_filters,
    state_query,
)
from ember.dashboard.ray_state_rows import (
    TASK_STATE,
    actor_rows,
    cluster_event_rows,
    job_rows,
    node_rows,
    object_rows,
    placement_group_rows,
    task_row,
    worker_rows,
)
from ember.dashboard.ray_state_schema import (
    RESOURCES,
    ErrorReply,
    ListReply,
    SummaryReply,
)
from ember.dashboard.ray_state_summary import (
    actor_summary,
    object_summary,
    task_summary,
    task_summary_from_table,
)
from ember.dashboard.ray_state_tasks import task_candidates
from ember.dashboard.routes.objects import refresh_objects
from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

router = APIRouter(tags=["ray state API"])
RAY_EVENT_STATES = frozenset(
    {
        "PENDING_ARGS_AVAIL",
        "PENDING_NODE_ASSIGNMENT",
        "SUBMITTED_TO_WORKER",
        "RUNNING",
        "FINISHED",
        "FAILED",
    }
)
OBJECTS_MAX_AGE = 2.0  # seconds an agent's object rows are reused (as /api/objects)


def _doc(resource: str) -> dict[int | str, dict[str, Any]]:
    model = RESOURCES[resource].model
    return {
        200: {"model": ListReply[model]},  # type: ignore[valid-type]
        400: {"model": ErrorReply, "description": "the request refused, and why"},
    }


SUMMARY_DOC: dict[int | str, dict[str, Any]] = {
    200: {"model": SummaryReply},
    400: {"model": ErrorReply, "description": "the request refused, and why"},
}


def _listing(
    resource: str, q: StateQuery, rows: list[dict[str, Any]], warning: str = ""
) -> Response:
    res = RESOURCES[resource]
    try:
        filters = parse_filters(q, res)
    except StateApiError as e:
        return error(str(e))
    out = Listing(partial_failure_warning=warning).take(rows, filters, q.limit)
    return out.reply(res, q.detail)


async def _fresh(ctx: DashboardContext) -> None:
    """Ray's state API answers from the GCS as of the call: the tables the dashboard polls
    each second are polled now (``GcsClient.fresh``)."""
    if ctx.gcs is not None:
        await ctx.gcs.fresh()


@router.get("/api/v0/actors", responses=_doc("actors"))
async def list_actors(
    q: StateQuery = Depends(state_query), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    await _fresh(ctx)
    return _listing("actors", q, actor_rows(ctx.state))


@router.get("/api/v0/tasks", responses=_doc("tasks"))
async def list_tasks(
    q: StateQuery = Depends(state_query), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    """Tasks newest first. Ember records no task for a driver itself, so ``exclude_driver``
    changes nothing."""
    st = ctx.state
    res = RESOURCES["tasks"]
    try:
        filters = parse_filters(q, res)
    except StateApiError as e:
        return error(str(e))
    n = len(st.tasks)
    if filters:
        slots, rest = task_candidates(st.tasks, filters)
        out = Listing().take(slots, rest, q.limit, lambda slot: task_row(st, slot))
        out.total = n
    else:
        newest = islice(st.tasks.newest_slots(), q.limit)
        out = Listing(total=n, num_filtered=n, rows=[task_row(st, s) for s in newest])
    if q.detail:
        # Each task's phases only for the rows shown, not for every row the filters read.
        out.rows = [
            {**r, "events": _events(ctx, r["task_id"], r["attempt_number"])} for r in out.rows
        ]
    return out.reply(res, q.detail)


def _events(ctx: DashboardContext, task_id: str, attempt: int) -> list[dict[str, Any]] | None:
    view = ctx.state.tasks.get(task_id, attempt)
    if view is None:
        return None
    # Ray's clients read each event's state as one of Ray's task states: Ember's own phases
    # in between (arguments fetched, executed) are left out.
    return [
        {"state": TASK_STATE.get(e["state"], e["state"]), "created_ms": int(e["time"] * 1000)}
        for e in view.events()
        if e["state"] in RAY_EVENT_STATES
    ]


@router.get("/api/v0/nodes", responses=_doc("nodes"))
async def list_nodes(
    q: StateQuery = Depends(state_query), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    await _fresh(ctx)
    return _listing("nodes", q, node_rows(ctx.state))


@router.get("/api/v0/workers", responses=_doc("workers"))
async def list_workers(
    q: StateQuery = Depends(state_query), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    jobs, _ = await _jobs(ctx)  # without them, drivers are left out: no warning needed
    return _listing("workers", q, worker_rows(ctx.state, jobs))


@router.get("/api/v0/objects", responses=_doc("objects"))
async def list_objects(
    q: StateQuery = Depends(state_query), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    """Every reference the nodes' processes hold (the memory view, asked of the agents)."""
    try:
        parse_filters(q, RESOURCES["objects"])  # refuse a bad query before asking the nodes
    except StateApiError as e:
        return error(str(e))
    missing = await refresh_objects(ctx, OBJECTS_MAX_AGE)
    return _listing("objects", q, object_rows(ctx.state), warning=_missing(missing))


def _missing(missing: dict[str, str]) -> str:
    if not missing:
        return ""
    return "Some nodes did not answer, their rows are left out: " + "; ".join(
        f"{nid}: {why}" for nid, why in sorted(missing.items())
    )


@router.get("/api/v0/placement_groups", responses=_doc("placement_groups"))
async def list_placement_groups(
    q: StateQuery = Depends(state_query), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    await _fresh(ctx)
    return _listing("placement_groups", q, placement_group_rows(ctx.state))


@router.get("/api/v0/jobs", responses=_doc("jobs"))
async def list_jobs(
    q: StateQuery = Depends(state_query), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    """The jobs ``GET /api/jobs/`` lists: submitted ones and drivers started by hand."""
    try:
        jobs = [jr.details(r) for r in await job_manager(ctx).list()]
        warning = ""
    except JobError as e:  # no GCS here: the reply says so, it is not a 5xx
        jobs, warning = [], f"No jobs can be listed: {e}"
    return _listing("jobs", q, job_rows(jobs), warning=warning)


async def _jobs(ctx: DashboardContext) -> tuple[list[dict[str, Any]], str]:
    """The GCS's job table, or none and why."""
    if ctx.gcs is None:
        return [], "The dashboard is not connected to the GCS: no jobs can be listed."
    try:
        return await ctx.gcs.list_jobs(), ""
    except Exception as e:  # the GCS away or slow: the reply says so, it is not a 5xx
        return [], f"The GCS did not list its jobs: {e}"


@router.get("/api/v0/runtime_envs", responses=_doc("runtime_envs"))
async def list_runtime_envs(q: StateQuery = Depends(state_query)) -> Response:
    """Ember has no runtime environments: always an empty list."""
    return _listing("runtime_envs", q, [])


@router.get("/api/v0/cluster_events", responses=_doc("cluster_events"))
async def list_cluster_events(
    q: StateQuery = Depends(state_query), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    return _listing("cluster_events", q, cluster_event_rows(ctx.state))


# -- summaries -----------------------------------------------------------------------------
def _summary(cluster: dict[str, Any], total: int, matched: int, warning: str = "") -> Response:
    return ok(
        {
            "total": total,
            "num_after_truncation": total,
            "num_filtered": matched,
            "result": {"node_id_to_summary": {"cluster": cluster}},
            "partial_failure_warning": warning,
            "warnings": None,
        }
    )


@router.get("/api/v0/tasks/summarize", responses=SUMMARY_DOC)
async def summarize_tasks(
    q: StateQuery = Depends(state_query),
    summary_by: Annotated[
        str, Query(max_length=32, description="func_name (the only grouping Ember has)")
    ] = "func_name",
    ctx: DashboardContext = Depends(get_ctx),
) -> Response:
    if summary_by != "func_name":
        return error(f"summary_by={summary_by!r} is not supported; use func_name")
    st = ctx.state
    try:
        filters = parse_filters(q, RESOURCES["tasks"])
    except StateApiError as e:
        return error(str(e))
    if not filters:
        cluster, n = task_summary_from_table(st)
        return _summary(cluster, n, n)
    slots, rest = task_candidates(st.tasks, filters)
    out = Listing().take(slots, rest, len(st.tasks), lambda s: task_row(st, s))
    return _summary(task_summary(out.rows), len(st.tasks), out.num_filtered)


@router.get("/api/v0/actors/summarize", responses=SUMMARY_DOC)
async def summarize_actors(
    q: StateQuery = Depends(state_query), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    await _fresh(ctx)
    return _filtered_summary("actors", q, actor_rows(ctx.state), actor_summary)


@router.get("/api/v0/objects/summarize", responses=SUMMARY_DOC)
async def summarize_objects(
    q: StateQuery = Depends(state_query), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    try:
        parse_filters(q, RESOURCES["objects"])
    except StateApiError as e:
        return error(str(e))
    missing = await refresh_objects(ctx, OBJECTS_MAX_AGE)
    return _filtered_summary(
        "objects", q, object_rows(ctx.state), object_summary, _missing(missing)
    )


def _filtered_summary(
    resource: str, q: StateQuery, rows: list[dict[str, Any]], summarize: Any, warning: str = ""
) -> Response:
    try:
        filters = parse_filters(q, RESOURCES[resource])
    except StateApiError as e:
        return error(str(e))
    out = Listing().take(rows, filters, len(rows))
    return _summary(summarize(out.rows), out.total, out.num_filtered, warning)


# -- logs ----------------------------------------------------------------------------------
@router.get("/api/v0/logs")
async def list_logs(
    node_id: Annotated[str | None, Query(max_length=64, description="a node id")] = None,
    node_ip: Annotated[str | None, Query(max_length=64, description="or the node's IP")] = None,
    glob: Annotated[str, Query(max_length=256, description="file names to list")] = "*",
    timeout: Annotated[int, Query(ge=1, le=3600)] = DEFAULT_TIMEOUT,
    ctx: DashboardContext = Depends(get_ctx),
) -> Response:
    """A node's log files by category (``{"raylet": [names], "worker_out": [...], ...}``)."""
    st = ctx.state
    if not node_id and not node_ip:
        return error("Both node id and node ip are not provided. Provide at least one of them.")
    if not node_id:
        node_id = next((r["node_id"] for r in node_rows(st) if r["node_ip"] == node_ip), None)
        if node_id is None:
            return error(f"Cannot find matching node_id for a given node ip {node_ip}", 404)
    try:
        node_id = st.resolve_node_id(node_id)
    except LookupError as e:
        return error(str(e), 404)
    by_category: dict[str, list[str]] = {}
    for f in st.logs.get(node_id, []):
        name = f.get("name") or ""
        if not fnmatch.fnmatch(name, glob):
            continue
        by_category.setdefault(_log_category(f), []).append(name)
    return ok(by_category)


def _log_category(f: dict[str, Any]) -> str:
    component = f.get("component") or "internal"
    if component == "worker":
        return "worker_err" if f.get("stream") == "err" else "worker_out"
    return component
