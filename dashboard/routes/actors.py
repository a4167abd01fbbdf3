"""``/api/actors``, ``/api/actors/{id}`` and ``POST /api/actors/{id}/kill``."""

from __future__ import annotations

from typing import Annotated, Any

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.routes.params import ListParams, json_response, list_params
from ember.dashboard.schemas import ACTORS
from ember.protocol.messages.gcs import NoSuchActor
from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response

router = APIRouter(tags=["actors"])
COMPUTED = {"executed_calls", "pending_calls", "creator_actor_id"}


@router.get("/api/actors", response_model=None, responses=ACTORS.page_responses())
async def list_actors(
    q: ListParams = Depends(list_params), ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    preds = q.predicates(ACTORS.filterable)
    st = ctx.state
    # Call counts and the creator are computed per row: only when a filter or sort needs them.
    keys = {p.key for p in preds} | ({q.sort_by} if q.sort_by else set())
    view = (lambda r: st.actor_row(r["actor_id"])) if keys & COMPUTED else None
    out = q.page(
        list(st.actors.values()),
        preds,
        view=view,
        render=lambda r: st.actor_row(r["actor_id"]),
    )
    out["dropped"] = st.dropped["actors"]
    return json_response(out)


@router.get("/api/actors/{actor_id}", response_model=None, responses=ACTORS.detail_responses())
async def get_actor(actor_id: str, ctx: DashboardContext = Depends(get_ctx)) -> dict[str, Any]:
    actor_id = _resolve(ctx, actor_id)
    row = ctx.state.actor_row(actor_id)
    row["children"] = [
        a
        for a, r in ctx.state.actors.items()
        if r.get("owner_worker_id") and r.get("owner_worker_id") == row.get("worker_id")
    ]
    return row


@router.post("/api/actors/{actor_id}/kill")
async def kill_actor(
    actor_id: str,
    no_restart: Annotated[bool, Query(description="false lets a restartable actor restart")] = True,
    reason: Annotated[
        str | None,
        Query(
            max_length=200,
            description="the death cause to record, naming who asked; "
            "default 'killed from the dashboard'",
        ),
    ] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> dict[str, Any]:
    actor_id = _resolve(ctx, actor_id)
    row = ctx.state.actors[actor_id]
    if row.get("state") == "DEAD":
        # A clear answer, not an error page: the user asked about an actor that is gone.
        return {
            "ok": False,
            "actor_id": actor_id,
            "message": f"actor {actor_id} is already dead: {row.get('death_cause') or ''}",
        }
    if ctx.gcs is None:
        raise HTTPException(503, "the dashboard is not connected to the GCS; cannot kill actors")
    try:
        await ctx.gcs.kill_actor(
            actor_id, no_restart=no_restart, reason=reason or "killed from the dashboard"
        )
    except NoSuchActor as e:
        raise HTTPException(404, f"{e}; GET /api/actors lists the actors") from None
    return {"ok": True, "actor_id": actor_id}


def _resolve(ctx: DashboardContext, actor_id: str) -> str:
    actors = ctx.state.actors
    if actor_id in actors:
        return actor_id
    if len(actor_id) >= 6:
        matches = [a for a in actors if a.startswith(actor_id.lower())]
        if len(matches) == 1:
            return matches[0]
    named = [a for a, r in actors.items() if r.get("name") == actor_id and r.get("state") != "DEAD"]
    if len(named) == 1:
        return named[0]
    raise HTTPException(404, f"no actor {actor_id!r}; GET /api/actors lists the actors")
