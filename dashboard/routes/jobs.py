"""Ray's Jobs REST API (``/api/jobs/``, ``/api/packages/``), with Ray's paths and shapes, so
Ray's ``ray job`` CLI and ``JobSubmissionClient`` work against Ember unchanged. The work is
the job manager's (``job_manager.py``); logs are read through the job's node's agent.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Annotated, Any

from ember.dashboard import job_packages as pk
from ember.dashboard import job_records as jr
from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.job_manager import JobError, JobManager, job_manager
from ember.dashboard.schemas import JOBS
from fastapi import (
    APIRouter,
    Depends,
    HTTPException,
    Query,
    Request,
    WebSocket,
    WebSocketDisconnect,
)
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

router = APIRouter(tags=["jobs"])
CHUNK = 256 * 1024
TAIL_POLL_S = 0.5
# What GET .../logs holds at most: the end of a larger log, with a line saying so.
LOGS_MAX_BYTES = int(os.environ.get("EMBER_JOB_LOGS_MAX_BYTES", str(64 * 1024 * 1024)))
LAST_BYTES_MAX = 1 << 40
LastBytes = Annotated[
    int | None,
    Query(ge=0, le=LAST_BYTES_MAX, description="only the log's last N bytes, from a line's start"),
]


class JobSubmitRequest(BaseModel):
    """Ray's ``JobSubmitRequest`` (ray/dashboard/modules/job/common.py)."""

    entrypoint: str
    submission_id: str | None = None
    job_id: str | None = None  # Ray's deprecated spelling of submission_id
    runtime_env: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    entrypoint_num_cpus: float | None = None
    entrypoint_num_gpus: float | None = None
    entrypoint_memory: int | None = None
    entrypoint_resources: dict[str, float] | None = None
    entrypoint_label_selector: dict[str, str] | None = None


def manager(ctx: DashboardContext) -> JobManager:
    try:
        return job_manager(ctx)
    except JobError as e:
        raise HTTPException(e.status, str(e)) from None


async def _call(coro: Any) -> Any:
    try:
        return await coro
    except (JobError, pk.PackageError) as e:
        raise HTTPException(e.status, str(e)) from None


@router.post("/api/jobs/")
async def submit(req: JobSubmitRequest, ctx: DashboardContext = Depends(get_ctx)) -> dict[str, str]:
    if not req.entrypoint.strip():
        raise HTTPException(400, "entrypoint is empty: give the command the job runs")
    for k in ("entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory"):
        if (getattr(req, k) or 0) < 0:
            raise HTTPException(400, f"{k} must be >= 0, got {getattr(req, k)}")
    package = None
    runtime_env = req.runtime_env or {}
    working_dir = runtime_env.get("working_dir")
    if working_dir:
        package = await _call(asyncio.to_thread(pk.uploaded, ctx.session_dir, working_dir))
    modules = runtime_env.get("py_modules") or []
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise HTTPException(400, "runtime_env py_modules must be a list of package URIs")
    names = [
        await _call(asyncio.to_thread(pk.uploaded, ctx.session_dir, m, "py_modules"))
        for m in modules
    ]
    sid = await _call(manager(ctx).submit(req.model_dump(), package, names))
    return {"submission_id": sid, "job_id": sid}


@router.get("/api/jobs/", response_model=None, responses=JOBS.page_responses())
async def list_jobs(ctx: DashboardContext = Depends(get_ctx)) -> list[dict[str, Any]]:
    return [jr.details(r) for r in await _call(manager(ctx).list())]


@router.get("/api/jobs/{job_id}", response_model=None, responses=JOBS.detail_responses())
async def get_job(job_id: str, ctx: DashboardContext = Depends(get_ctx)) -> dict[str, Any]:
    return jr.details(await _call(manager(ctx).find(job_id)))


@router.post("/api/jobs/{job_id}/stop")
async def stop_job(job_id: str, ctx: DashboardContext = Depends(get_ctx)) -> dict[str, bool]:
    return {"stopped": await _call(manager(ctx).stop(job_id))}


@router.delete("/api/jobs/{job_id}")
async def delete_job(job_id: str, ctx: DashboardContext = Depends(get_ctx)) -> dict[str, bool]:
    return {"deleted": await _call(manager(ctx).delete(job_id))}


@router.get("/api/jobs/{job_id}/logs")
async def job_logs(
    job_id: str,
    last_bytes: LastBytes = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> Response:
    """Ray's ``{"logs": text}``, streamed a chunk at a time, so the dashboard holds one chunk
    whatever the log's size (holding the text, its bytes and its JSON at once cost ~4x the
    log). A log over ``LOGS_MAX_BYTES`` (or ``last_bytes``, an Ember extension the page
    uses) gives its end from a line's start, after a line saying how much was left out, and
    says so in ``X-Ember-Logs-Left-Out`` (Ray's client reads only ``logs``: a JSON field more
    would break it). What is written while it is read waits for the next read: the reply
    stops at the end the first read saw."""
    rec = await _call(manager(ctx).find(job_id))
    if not rec.get("log_name") or ctx.hub is None:
        return JSONResponse({"logs": ""})
    first = await _read(ctx, rec, 0)
    if first.get("status") == 403:  # the job made its log a link: refused, saying why
        raise HTTPException(403, first["error"])
    if first.get("error"):
        # The node holding the log does not answer (it died, or its agent is away): an
        # empty log for Ray's clients, and why, for those that read this header.
        why = f"the log is on node {rec.get('driver_node_id')}, which does not answer: "
        return JSONResponse(
            {"logs": ""}, headers={"X-Ember-Logs-Unavailable": (why + first["error"])[:500]}
        )
    end = int(first.get("size") or first.get("next_offset") or 0)
    keep = min(LOGS_MAX_BYTES, last_bytes) if last_bytes is not None else LOGS_MAX_BYTES
    start, first = await _from_a_line_start(ctx, rec, first, max(0, end - keep))
    headers = {"X-Ember-Logs-Left-Out": str(start)} if start else {}
    return StreamingResponse(
        _logs_json(ctx, rec, first, start, end), media_type="application/json", headers=headers
    )


async def _from_a_line_start(
    ctx: DashboardContext, rec: dict[str, Any], first: dict[str, Any], start: int
) -> tuple[int, dict[str, Any]]:
    """The first line start at or after ``start`` and the read from there (``first``, the
    read at 0, when ``start`` is 0). A chunk with no line end starts where it is."""
    if not start:
        return 0, first
    res = await _read(ctx, rec, start)
    head = _encoded(res)
    cut = head.find(b"\n") + 1
    res["data"] = head[cut:].decode("utf-8", "surrogateescape")
    return start + cut, res


def _last_bytes(raw: str | None) -> int | None:
    """The tail's ``last_bytes`` query value (WebSocket routes get no Query validation)."""
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) > LAST_BYTES_MAX:
        raise ValueError(f"last_bytes must be a whole number of bytes from 0 to 2**40, got {raw!r}")
    return int(raw)


def _left_out_line(left_out: int) -> str:
    return f"[ember: the first {left_out} bytes of this log are left out]\n"


async def _logs_json(
    ctx: DashboardContext, rec: dict[str, Any], res: dict[str, Any], left_out: int, end: int
) -> AsyncIterator[bytes]:
    yield b'{"logs": "'
    if left_out:
        yield _json_str(_left_out_line(left_out))
    while True:
        yield _json_str(res.get("data", ""))
        offset = res.get("next_offset", end)
        if res.get("eof", True) or res.get("error") or not res.get("data") or offset >= end:
            break
        res = await _read(ctx, rec, offset, min(CHUNK, end - offset))
    yield b'"}'


def _json_str(text: str) -> bytes:
    """``text`` as the inside of a JSON string."""
    return json.dumps(text)[1:-1].encode()


def _encoded(res: dict[str, Any]) -> bytes:
    return res.get("data", "").encode("utf-8", "surrogateescape")


async def _read(
    ctx: DashboardContext, rec: dict[str, Any], offset: int, size: int = CHUNK
) -> dict[str, Any]:
    body = {"name": rec["log_name"], "offset": offset, "size": size}
    try:
        return await ctx.hub.call(rec["driver_node_id"], "log_read", body, timeout=10)
    except Exception as e:  # the node's agent is away: the log is unreadable for now
        return {"error": str(e), "eof": True}


@router.websocket("/api/jobs/{job_id}/logs/tail")
async def tail_job_logs(ws: WebSocket, job_id: str) -> None:
    """Text messages of whole lines as they are written; closed (1000) once the job has
    ended and its last line was sent. With ``?last_bytes=N`` (an Ember extension: the page
    sends it so that opening a long log does not stream all of it to the browser), it starts
    from the first line of the log's last N bytes, after a line saying what was left out."""
    ctx: DashboardContext = ws.app.state.ctx
    try:
        rec = await manager(ctx).find(job_id)
    except JobError as e:
        await ws.close(code=1008, reason=str(e)[:120])
        return
    await ws.accept()
    try:
        last_bytes = _last_bytes(ws.query_params.get("last_bytes"))
    except ValueError as e:  # accepted first: a close before it reaches the client as a 403
        await ws.close(code=1008, reason=str(e)[:120])
        return
    offset, partial = 0, b""
    try:
        if last_bytes is not None and rec.get("log_name"):
            first = await _read(ctx, rec, 0)
            end = int(first.get("size") or first.get("next_offset") or 0)
            if end > last_bytes and not first.get("error"):
                offset, _ = await _from_a_line_start(ctx, rec, first, end - last_bytes)
                await ws.send_text(_left_out_line(offset))
        while True:
            # Read before the file: no line is missed. A stopped session's log (the history
            # server) grows no more, whatever its job's last status.
            ended = rec["status"] in jr.TERMINAL or bool(ctx.extra.get("history"))
            res = await _read(ctx, rec, offset) if rec.get("log_name") else {"eof": True}
            data = (
                res.get("data", "").encode("utf-8", "surrogateescape")
                if not res.get("error")
                else b""
            )
            if data:
                offset = res["next_offset"]
                lines, _, partial = (partial + data).rpartition(b"\n")
                if lines:
                    await ws.send_text((lines + b"\n").decode("utf-8", "replace"))
                if not res.get("eof", True):
                    continue
            elif ended:
                if partial:
                    await ws.send_text(partial.decode("utf-8", "replace"))
                break
            await asyncio.sleep(TAIL_POLL_S)
    except WebSocketDisconnect:
        return
    await ws.close(code=1000)


@router.get("/api/packages/{protocol}/{name}")
async def package_exists(
    protocol: str, name: str, ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    path = await _call(_path(ctx, protocol, name))
    if not os.path.exists(path):
        raise HTTPException(404, f"package {protocol}://{name} is not on this cluster")
    return Response(status_code=200)


@router.put("/api/packages/{protocol}/{name}")
async def upload_package(
    protocol: str, name: str, request: Request, ctx: DashboardContext = Depends(get_ctx)
) -> Response:
    path = await _call(_path(ctx, protocol, name))
    length = request.headers.get("content-length")
    declared = int(length) if length and length.isdigit() else None
    await _call(pk.store(path, request.stream(), declared))
    return Response(status_code=200)


async def _path(ctx: DashboardContext, protocol: str, name: str) -> str:
    return pk.path_of(ctx.session_dir, protocol, name)
