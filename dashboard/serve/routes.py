"""Ray Serve's REST API on Ember's dashboard, for Ray's own ``serve deploy/status/shutdown``
and ``ember serve``:

- ``GET /api/serve/applications/``: the controller's status record (KV ``serve``/``status``)
  as Ray's ``ServeInstanceDetails``;
- ``PUT /api/serve/applications/``: a Serve config (JSON). The dashboard starts Serve when it
  is not running (``python -m ember.serve start``, a separate process: the dashboard does not
  import the library), then leaves the config as a request record under KV
  ``serve``/``config_request`` (``{"seq": n, "config": {...}}``); the controller applies it and
  answers under the same key (``{"seq": n, "ok": bool, "errors": {app: text}, "error": text}``).
  A bad config is a 400 naming the field, and nothing running changes;
- ``DELETE /api/serve/applications/``: the record ``{"seq": n, "shutdown": true}``: every
  application is deleted and Serve stops.
- ``GET /api/ray/version``: the version check Ray's Serve CLI makes first.
- ``GET /api/serve/view``: the Serve page's figures (``page.py``): applications, deployments
  with request rates and latency percentiles, replicas, the controller's recent decisions.

In a stopped session's dashboard (``ember dashboard --history``, no GCS) both GETs answer
from the history's Serve records (``recorded.py``): Serve as it last ran; the view then says
``"history": true`` and, if Serve was shut down before the cluster stopped, when
(``"stopped"``). The PUT and DELETE need a live cluster.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.serve.details import empty, instance_details
from ember.dashboard.serve.page import serve_view
from ember.dashboard.serve.recorded import recorded_of
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import PlainTextResponse

router = APIRouter(tags=["serve"])
NAMESPACE = "serve"  # ember.serve.names: the controller's KV namespace and actor namespace
STATUS_KEY = b"status"
REQUEST_KEY = b"config_request"
DECISIONS_KEY = b"decisions"
CONTROLLER = "SERVE_CONTROLLER_ACTOR"
START_TIMEOUT_S = 120.0  # starting Serve: a controller and its proxy
APPLY_TIMEOUT_S = 120.0  # the controller imports each application's code
MAX_CONFIG_BYTES = 4 * 1024 * 1024


def _gcs(ctx: DashboardContext) -> Any:
    if ctx.gcs is None:
        raise HTTPException(503, "this dashboard has no GCS: it cannot run Serve")
    return ctx.gcs


async def _controller_alive(ctx: DashboardContext) -> bool:
    return await _gcs(ctx).get_named_actor(CONTROLLER, NAMESPACE) is not None


@router.get("/api/ray/version")
async def ray_version(ctx: DashboardContext = Depends(get_ctx)) -> dict[str, Any]:
    from ember.dashboard.routes.meta import version

    v = await version(ctx)
    return {k: v[k] for k in ("version", "ray_version", "ray_commit", "session_name")}


@router.get("/api/serve/applications/")
async def get_applications(ctx: DashboardContext = Depends(get_ctx)) -> dict[str, Any]:
    if ctx.gcs is None:  # a stopped session (--history): Serve as it last ran
        status = recorded_of(ctx.state).status
        return instance_details(status) if status else empty()
    if not await _controller_alive(ctx):
        return empty()
    raw = await _gcs(ctx).kv("kv_get", NAMESPACE, STATUS_KEY)
    return instance_details(json.loads(raw)) if raw else empty()


@router.get("/api/serve/view")
async def get_view(ctx: DashboardContext = Depends(get_ctx)) -> dict[str, Any]:
    status = decisions = None
    if ctx.gcs is None:  # a stopped session (--history): Serve as it last ran
        recorded = recorded_of(ctx.state)
        view = serve_view(recorded.status, recorded.decisions, ctx.state.serve)
        return {**view, "running": False, "history": True, "stopped": recorded.stopped}
    if await _controller_alive(ctx):
        raw = await ctx.gcs.kv("kv_get", NAMESPACE, STATUS_KEY)
        status = json.loads(raw) if raw else None
        raw = await ctx.gcs.kv("kv_get", NAMESPACE, DECISIONS_KEY)
        decisions = json.loads(raw) if raw else None
    return {**serve_view(status, decisions, ctx.state.serve), "history": False, "stopped": None}


async def _start_serve(ctx: DashboardContext, http_options: dict) -> None:
    """Starts the controller in a short-lived driver process, bounded."""
    cmd = [
        sys.executable,
        "-m",
        "ember.serve",
        "start",
        "--address",
        _gcs(ctx).address,
        "--http-options",
        json.dumps(http_options),
    ]
    if ctx.session_dir:
        cmd += ["--temp-dir", os.path.dirname(ctx.session_dir.rstrip("/"))]
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), START_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise HTTPException(503, f"Serve did not start within {START_TIMEOUT_S:.0f}s") from None
    if proc.returncode != 0:
        raise HTTPException(503, f"Serve could not start: {out.decode(errors='replace')[-2000:]}")


async def _request(ctx: DashboardContext, record: dict) -> dict:
    """Leaves a request record for the controller and waits (bounded) for its answer."""
    gcs = _gcs(ctx)
    seq = time.time_ns()
    await gcs.kv("kv_put", NAMESPACE, REQUEST_KEY, json.dumps({"seq": seq, **record}).encode())
    deadline = time.monotonic() + APPLY_TIMEOUT_S
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        raw = await gcs.kv("kv_get", NAMESPACE, REQUEST_KEY)
        reply = json.loads(raw) if raw else {}
        if reply.get("seq") == seq and "ok" in reply:
            return reply
        if not raw and record.get("shutdown"):
            return {"ok": True}
    raise HTTPException(503, f"the Serve controller did not answer within {APPLY_TIMEOUT_S:.0f}s")


@router.put("/api/serve/applications/")
async def put_applications(
    request: Request, ctx: DashboardContext = Depends(get_ctx)
) -> PlainTextResponse:
    body = await request.body()
    if len(body) > MAX_CONFIG_BYTES:
        raise HTTPException(413, f"a Serve config is at most {MAX_CONFIG_BYTES} bytes")
    try:
        config = json.loads(body)
    except ValueError as e:
        raise HTTPException(400, f"the body is not JSON: {e}") from None
    if not isinstance(config, dict):
        raise HTTPException(400, "a Serve config is a JSON object with an 'applications' list")
    if not await _controller_alive(ctx):
        await _start_serve(ctx, config.get("http_options") or {})
    reply = await _request(ctx, {"config": config})
    if not reply["ok"]:
        return PlainTextResponse(reply.get("error", "the config was refused"), status_code=400)
    failed = {k: v for k, v in (reply.get("errors") or {}).items() if v}
    # as Ray: the deploy is accepted; an application that fails shows as DEPLOY_FAILED
    return PlainTextResponse(json.dumps({"failed": failed}) if failed else "")


@router.delete("/api/serve/applications/")
async def delete_applications(ctx: DashboardContext = Depends(get_ctx)) -> PlainTextResponse:
    if await _controller_alive(ctx):
        await _request(ctx, {"shutdown": True})
    return PlainTextResponse("")
