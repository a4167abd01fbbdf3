"""``ember.timeline(filename=None)``: the cluster's tasks as a Chrome trace (chrome://tracing,
Perfetto, speedscope), laid out by ``ember.trace.writer``: a process per node, a thread
per worker, a slice per task with its phases nested, arrows between tasks.

With a dashboard running (``node["dashboard_url"]``), the trace is the cluster's, streamed
from ``/api/timeline`` with the cluster token: every driver's tasks on every node. Without
one, the trace is this driver's own task events, which its bounded buffer keeps; when the
dashboard does not answer or refuses, the same, with a warning naming its error.
"""

from __future__ import annotations

import io
import json
import os
import urllib.error
import urllib.parse
import urllib.request
import warnings
from types import SimpleNamespace
from typing import Any

from ember import global_state
from ember.core_worker.task_events import unpack_extra

_FIELDS = ("t_pending", "t_scheduled", "t_start", "t_args", "t_executed", "t_end")
_TIMING_KEYS = (("start", "t_start"), ("args_ready", "t_args"), ("executed", "t_executed"))


def local_records(worker: Any) -> tuple[list[Any], Any]:
    """This process's task events as timeline records plus the store of spans and flows."""
    from ember.trace.store import TimelineStore

    node_id = getattr(worker, "node_id_hex", "") or ""
    job = worker.job_id.hex() if isinstance(getattr(worker, "job_id", None), bytes) else ""
    records: dict[bytes, SimpleNamespace] = {}
    store = TimelineStore()
    for task_id, state, t, attempt, packed in list(worker.events):
        extra = unpack_extra(packed)
        if state == "PROFILE":
            store.add_span(node_id, job, task_id.hex(), t, extra)
            continue
        rec = records.get(task_id)
        if rec is None:
            rec = records[task_id] = SimpleNamespace(
                task_id=task_id.hex(),
                name="",
                state=state,
                job_id=job,
                node_id=node_id,
                pid=None,
                attempt=attempt,
                **dict.fromkeys(_FIELDS),
            )
        rec.attempt = max(rec.attempt, attempt)
        if state == "PENDING_ARGS_AVAIL" and rec.t_pending is None:
            rec.t_pending = t
        elif state == "SUBMITTED_TO_WORKER":
            rec.t_scheduled = t
        elif state in ("FINISHED", "FAILED"):
            rec.state = state
            extra = extra or {}
            tm = extra.get("timings") or {}
            rec.name = extra.get("function") or rec.name
            rec.pid = extra.get("pid")
            rec.node_id = extra.get("node_id") or node_id
            for key, field in _TIMING_KEYS:
                if key in tm:
                    setattr(rec, field, tm[key])
            rec.t_end = tm.get("end", t)
            if "parent" in extra:
                store.add_flow(
                    rec.task_id,
                    extra["parent"],
                    node_id,
                    extra.get("owner_pid"),
                    extra.get("arg_tasks") or (),
                )
    return list(records.values()), store


def _local_trace(worker: Any, out: Any) -> None:
    from ember.trace import writer as tl

    records, store = local_records(worker)
    ip = worker.node.get("node_ip", "127.0.0.1") if isinstance(worker.node, dict) else "?"
    labels = {getattr(worker, "node_id_hex", ""): f"node {ip}"}
    tl.write(out, records, store=store, node_labels=labels, driver_pids=[os.getpid()])


def fetch(
    url: str,
    out: Any,
    params: dict[str, Any] | None = None,
    timeout: float = 60.0,
    token: str | None = None,
) -> None:
    """Streams ``/api/timeline`` of the dashboard at ``url`` into ``out`` (text), with the
    cluster token when there is one (a dashboard off loopback answers 401 without it)."""
    query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
    req = urllib.request.Request(url.rstrip("/") + "/api/timeline" + (f"?{query}" if query else ""))
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        reader = io.TextIOWrapper(resp, encoding="utf-8")
        while True:
            chunk = reader.read(1 << 16)
            if not chunk:
                break
            out.write(chunk)


def _why(url: str, e: Exception) -> str:
    """The dashboard's error in words: its status and ``detail`` for an HTTP error."""
    if isinstance(e, urllib.error.HTTPError):
        try:
            detail = json.loads(e.read() or b"{}").get("detail")
        except (ValueError, AttributeError, OSError):
            detail = None
        return f"the dashboard at {url} refused the request (HTTP {e.code}: {detail or e.reason})"
    return f"the dashboard at {url} did not answer ({getattr(e, 'reason', e)})"


def _flush_events(worker: Any) -> None:
    """Sends this driver's newest task events to the agent now rather than within the
    second, so a timeline taken right after ``get`` has the tasks just finished."""
    import asyncio
    import concurrent.futures

    exporter = getattr(worker, "event_exporter", None)
    loop = getattr(worker, "loop", None)
    if exporter is None or loop is None or loop.is_closed():
        return
    try:
        asyncio.run_coroutine_threadsafe(exporter.flush(), loop).result(timeout=5.0)
    except (concurrent.futures.TimeoutError, RuntimeError, OSError):
        pass  # best effort: the periodic flush sends them anyway


def timeline(filename: str | None = None) -> list[dict[str, Any]] | None:
    """The trace: written to ``filename`` (streamed; any size), or returned as a list."""
    worker = global_state.require_worker()
    node = worker.node if isinstance(worker.node, dict) else {}
    url = node.get("dashboard_url") or os.environ.get("EMBER_DASHBOARD_URL")
    out: Any = open(filename, "w") if filename else io.StringIO()  # noqa: SIM115
    try:
        if url:
            from ember.cluster_token import dashboard_token

            token = dashboard_token(node.get("session_dir"), node.get("token_file"))
            try:
                _flush_events(worker)
                fetch(url, out, token=token)
            except (OSError, urllib.error.URLError) as e:
                warnings.warn(
                    f"ember.timeline(): {_why(url, e)}; the timeline has only this driver's "
                    "own tasks.",
                    RuntimeWarning,
                    stacklevel=3,  # the caller of ember.timeline (through ember.api)
                )
                out.seek(0)
                out.truncate()
                _local_trace(worker, out)
        else:
            _local_trace(worker, out)
        events = json.loads(out.getvalue()) if filename is None else None
    finally:
        out.close()
    _warn_losses(events[-1].get("args", {}) if events else _file_info(filename))
    return events


def _file_info(path: str | None) -> dict[str, Any]:
    from ember.trace.writer import trace_info

    return trace_info(path) if path else {}


def _warn_losses(info: dict[str, Any]) -> None:
    """The trace lacks what the dashboard's bounded stores let go (tasks evicted past its
    ``max_tasks``...): say so, as ``ember timeline`` does."""
    from ember.trace.writer import loss_warnings

    for line in loss_warnings(info):
        warnings.warn(f"ember.timeline(): {line}", RuntimeWarning, stacklevel=4)
