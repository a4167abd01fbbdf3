"""``list_logs`` and ``get_log`` of Ray's ``ray.util.state``, over the dashboard's log
endpoints (``/api/v0/logs`` for the names, ``/api/logs/{tail,download,follow}`` for a file's
lines; a task's own lines from ``/api/tasks/{id}/log``: Ray's ``/api/v0/logs/file`` is
served for ``task_id`` only)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ember.rest_client import DashboardClient, DashboardError
from ember.util.state.api import StateClient, one
from ember.util.state.common import DEFAULT_RPC_TIMEOUT, StateApiException


def list_logs(
    address: str | None = None,
    node_id: str | None = None,
    node_ip: str | None = None,
    glob_filter: str | None = None,
    timeout: int = DEFAULT_RPC_TIMEOUT,
) -> dict[str, list[str]]:
    """A node's log file names by category (``{"raylet": [...], "worker_out": [...]}``)."""
    if node_id is None and node_ip is None:
        raise ValueError("At least one of node ip and node id is required")
    params = [("node_id", node_id), ("node_ip", node_ip), ("glob", glob_filter or "*")]
    return StateClient(address).reply("/api/v0/logs", params, timeout)


ANSI = re.compile(r"\x1b[^m]*m")


def get_log(
    address: str | None = None,
    node_id: str | None = None,
    node_ip: str | None = None,
    filename: str | None = None,
    actor_id: str | None = None,
    task_id: str | None = None,
    pid: int | None = None,
    follow: bool = False,
    tail: int = -1,
    timeout: int = DEFAULT_RPC_TIMEOUT,
    suffix: str = "out",
    encoding: str | None = "utf-8",
    errors: str | None = "strict",
    submission_id: str | None = None,
    attempt_number: int = 0,
    _interval: float | None = None,
    filter_ansi_code: bool = False,
) -> Iterator[Any]:
    """The lines of a log file, each with its newline (``"".join`` gives the text): a file
    by ``filename`` on a node (``node_id`` or ``node_ip``), or the ``suffix`` file ("out" or
    "err") of the worker of ``pid`` on a node, of ``actor_id``, or of ``task_id``'s attempt.
    ``tail``: only the last lines (-1: all); ``follow``: then the lines written after, until
    the caller stops iterating. ``encoding=None`` yields bytes."""
    if submission_id is not None:
        raise StateApiException("Ember has no job submission: there is no submission log")
    client = StateClient(address)
    if task_id is not None and filename is None and pid is None:
        # The task's own lines (its attempt's bytes of the worker's file), as Ray's
        # task_log_info gives them; follow and tail read them as one finished text.
        yield from _task_lines(client, task_id, suffix, tail, encoding, errors, timeout)
        return
    node, name = _log_file(
        client, node_id, node_ip, filename, actor_id, task_id, pid, suffix, attempt_number, timeout
    )
    for line in _log_lines(client.dashboard, node, name, follow, tail, timeout):
        if isinstance(line, bytes):  # the whole file, read as it is stored
            if encoding is None:
                yield line
                continue
            line = line.decode(encoding, errors or "strict")
        if filter_ansi_code:
            line = ANSI.sub("", line)
        yield line if encoding is not None else line.encode("utf-8")


def _task_lines(
    client: StateClient,
    task_id: str,
    suffix: str,
    tail: int,
    encoding: str | None,
    errors: str | None,
    timeout: float,
) -> Iterator[Any]:
    try:
        reply = client.dashboard.get(
            f"/api/tasks/{task_id}/log", [("stream", suffix)], timeout=timeout
        )
    except DashboardError as e:
        raise StateApiException(str(e)) from None
    if reply.get("note"):
        raise StateApiException(f"Task {task_id}: {reply['note']}")
    lines = str(reply.get("text") or "").splitlines(keepends=True)
    if tail >= 0:
        lines = lines[-tail:] if tail else []
    for line in lines:
        if encoding is None:
            yield line.encode("utf-8", "surrogateescape")
        else:
            yield line.encode("utf-8", "surrogateescape").decode(encoding, errors or "strict")


def _log_file(
    client: StateClient,
    node_id: str | None,
    node_ip: str | None,
    filename: str | None,
    actor_id: str | None,
    task_id: str | None,
    pid: int | None,
    suffix: str,
    attempt_number: int,
    timeout: float,
) -> tuple[str, str]:
    """(node id, file name) of the log ``get_log`` was asked for."""
    if actor_id is not None:
        actor = one(client.get("actors", actor_id, timeout))
        if actor is None or not actor.pid:
            raise StateApiException(f"Actor {actor_id} not found or not started")
        node_id, pid = actor.node_id, actor.pid
    elif task_id is not None:
        rows = [
            t
            for t in client.get("tasks", task_id, timeout)
            if t.attempt_number == attempt_number  # type: ignore[attr-defined]
        ]
        if not rows or not rows[0].worker_pid:  # type: ignore[attr-defined]
            raise StateApiException(f"Task {task_id} (attempt {attempt_number}) has not run")
        node_id, pid = rows[0].node_id, rows[0].worker_pid  # type: ignore[attr-defined]
    if node_id is None:
        if node_ip is None:
            raise StateApiException("Provide node_id or node_ip to find the log on")
        nodes = client.get("nodes", node_ip, timeout, key="node_ip")
        if not nodes:
            raise StateApiException(f"Cannot find matching node_id for a given node ip {node_ip}")
        node_id = nodes[0].node_id  # type: ignore[attr-defined]
    if filename is not None:
        return node_id, filename
    if pid is None:
        raise StateApiException("Provide filename, actor_id, task_id or pid")
    query = [("limit", 10_000), ("filter", f"node_id={node_id}"), ("filter", f"pid={pid}")]
    try:
        files = client.dashboard.get("/api/logs", query, timeout=timeout)["items"]
    except DashboardError as e:
        raise StateApiException(str(e)) from None
    live = [f for f in files if f.get("stream") == suffix and not f.get("rotated")]
    if not live:
        raise StateApiException(f"No {suffix} log of process {pid} on node {node_id}")
    return live[0]["node_id"], live[0]["name"]


def _log_lines(
    dashboard: DashboardClient, node_id: str, name: str, follow: bool, tail: int, timeout: float
) -> Iterator[str | bytes]:
    """The file's lines: text from the tail and follow endpoints, bytes from a download."""
    where = [("node_id", node_id), ("name", name)]
    try:
        if follow:
            yield from _follow(dashboard, where, tail)
        elif tail == 0:
            return
        elif tail > 0:
            reply = dashboard.get("/api/logs/tail", [*where, ("lines", tail)], timeout)
            yield from (line + "\n" for line in reply["lines"])
        else:
            with dashboard.open("GET", "/api/logs/download", where, timeout) as resp:
                yield from resp  # the response reads line by line
    except DashboardError as e:
        raise StateApiException(str(e)) from None


def _follow(dashboard: DashboardClient, where: list[tuple[str, Any]], tail: int) -> Iterator[str]:
    """The lines of ``/api/logs/follow`` (server-sent events) as they come; a quiet file is
    no error, so the read waits as long as the caller keeps iterating."""
    start = [("lines", min(tail if tail >= 0 else 1000, 10_000))]
    with dashboard.open("GET", "/api/logs/follow", where + start, timeout=365 * 86_400) as resp:
        for raw in resp:
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            if text.startswith("data:"):
                data = json.loads(text[5:].strip() or "{}")
                yield from (line + "\n" for line in data.get("lines") or [])
