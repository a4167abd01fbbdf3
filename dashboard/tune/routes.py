"""``/api/tune``: the Tune view's experiments, their trials table, the trials' curves, and
stopping a trial or an experiment (the driver's controller reads the request from the KV and
stops what was asked, with the reason on the trial's row). Behind the cluster token as every
route is when the dashboard is reachable; refused in history mode (``history_server``)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.query import QueryError
from ember.dashboard.routes.params import ListParams, json_response, list_params
from ember.dashboard.tune.store import Experiment, store_of
from fastapi import APIRouter, Body, Depends, HTTPException, Query
from fastapi.responses import Response

router = APIRouter(tags=["tune"])
MAX_CURVE_TRIALS = 50  # trials per curves request: a chart of more is unreadable anyway


def _experiment(ctx: DashboardContext, name: str) -> Experiment:
    exp = store_of(ctx.state).get(name)
    if exp is None:
        known = ", ".join(sorted(store_of(ctx.state).experiments)) or "none yet"
        raise HTTPException(404, f"no Tune experiment named {name!r} (experiments: {known})")
    return exp


def _with_places(ctx: DashboardContext, row: dict[str, Any]) -> dict[str, Any]:
    """The row with its actor's node and pid, from the actors the dashboard knows."""
    actor = ctx.state.actors.get(row.get("actor_id") or "")
    if actor is None:
        return row
    return {**row, "node_id": actor.get("node_id"), "pid": actor.get("pid")}


@router.get("/api/tune/experiments")
async def list_experiments(ctx: DashboardContext = Depends(get_ctx)) -> Response:
    exps = store_of(ctx.state).experiments.values()
    rows = sorted((e.summary() for e in exps), key=lambda r: -(r.get("start_time") or 0))
    return json_response({"experiments": rows, "history": ctx.gcs is None})


@router.get("/api/tune/experiments/{name}")
async def get_experiment(name: str, ctx: DashboardContext = Depends(get_ctx)) -> Response:
    exp = _experiment(ctx, name)
    return json_response({**exp.summary(), "columns": exp.columns})


@router.get("/api/tune/experiments/{name}/trials")
async def list_trials(
    name: str,
    q: ListParams = Depends(list_params),
    columns: Annotated[
        str | None,
        Query(description="comma-separated columns to return (trial_id always); default all"),
    ] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> Response:
    """The trials table: ``config/<key>`` per hyperparameter, ``last/<metric>`` and
    ``best/<metric>`` per metric, and status, iterations, time, node, actor, error."""
    exp = _experiment(ctx, name)
    preds = q.predicates(exp.columns)
    wanted = None
    if columns:
        wanted = ["trial_id", *(c.strip() for c in columns.split(",") if c.strip())]
        unknown = [c for c in wanted if c not in exp.columns]
        if unknown:
            raise QueryError(
                "columns",
                f"unknown column(s) {', '.join(unknown)}; columns: {', '.join(exp.columns)}",
            )
    places = any(p.key in ("node_id", "pid") for p in preds) or q.sort_by in ("node_id", "pid")

    def render(row: dict[str, Any]) -> dict[str, Any]:
        row = _with_places(ctx, row)
        return row if wanted is None else {c: row.get(c) for c in wanted}

    rows = exp.rows()
    if q.sort_by is not None and not places:
        # Sorted once per change of the rows (cached), then filtered and paged in order.
        rows = exp.sorted_rows(q.sort_by, q.descending)
        q = dataclasses.replace(q, sort_by=None)
    out = q.page(
        rows,
        preds,
        view=(lambda r: _with_places(ctx, r)) if places else None,
        render=render,
    )
    out.update(
        experiment=name,
        columns=exp.columns,
        best_trial_id=exp.best_trial_id,
        metric=exp.record.get("metric"),
        mode=exp.record.get("mode"),
    )
    return json_response(out)


@router.get("/api/tune/experiments/{name}/curves")
async def trial_curves(
    name: str,
    trial: Annotated[list[str], Query(description="a trial id, repeatable")],
    metric: Annotated[str | None, Query(description="one metric; default all")] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> Response:
    """Each trial's curves: ``iter`` and ``time`` (time_total_s) as x, and the metrics'
    values, at most a few hundred points per trial (thinned evenly, newest kept)."""
    exp = _experiment(ctx, name)
    if len(trial) > MAX_CURVE_TRIALS:
        raise QueryError("trial", f"at most {MAX_CURVE_TRIALS} trials per request")
    unknown = [t for t in trial if t not in exp.where]
    if unknown:
        raise HTTPException(404, f"experiment {name!r} has no trial {', '.join(unknown)}")
    curves = await store_of(ctx.state).curves(ctx.gcs, exp, trial)
    if metric is not None:
        curves = {
            t: {**c, "metrics": {metric: c["metrics"][metric]} if metric in c["metrics"] else {}}
            for t, c in curves.items()
        }
    return json_response({"experiment": name, "curves": curves})


def _live(ctx: DashboardContext, exp: Experiment) -> None:
    if ctx.gcs is None:
        raise HTTPException(405, "this dashboard has no cluster: nothing can be stopped")
    if exp.record.get("status") != "RUNNING":
        raise HTTPException(
            409, f"experiment {exp.name!r} is {exp.record.get('status')}: nothing to stop"
        )


StopBody = Annotated[dict[str, Any] | None, Body(description='{"reason": "why"} (optional)')]


def _reason(body: dict[str, Any] | None, default: str) -> str:
    reason = (body or {}).get("reason") or default
    if not isinstance(reason, str) or len(reason) > 500:
        raise HTTPException(422, "reason must be text of at most 500 characters")
    return reason


@router.post("/api/tune/experiments/{name}/stop")
async def stop_experiment(
    name: str, body: StopBody = None, ctx: DashboardContext = Depends(get_ctx)
) -> dict[str, Any]:
    exp = _experiment(ctx, name)
    _live(ctx, exp)
    reason = _reason(body, "stopped from the dashboard")
    await store_of(ctx.state).request_stop(ctx.gcs, name, None, reason)
    return {"requested": True, "experiment": name, "reason": reason}


@router.post("/api/tune/experiments/{name}/trials/{trial_id}/stop")
async def stop_trial(
    name: str, trial_id: str, body: StopBody = None, ctx: DashboardContext = Depends(get_ctx)
) -> dict[str, Any]:
    exp = _experiment(ctx, name)
    _live(ctx, exp)
    row = next((r for r in exp.rows() if r["trial_id"] == trial_id), None)
    if row is None:
        raise HTTPException(404, f"experiment {name!r} has no trial {trial_id!r}")
    if row.get("status") in ("TERMINATED", "ERROR"):
        raise HTTPException(409, f"trial {trial_id} is {row['status']}: nothing to stop")
    reason = _reason(body, "stopped from the dashboard")
    await store_of(ctx.state).request_stop(ctx.gcs, name, trial_id, reason)
    return {"requested": True, "experiment": name, "trial_id": trial_id, "reason": reason}
