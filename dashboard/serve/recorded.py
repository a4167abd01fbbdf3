"""Serve in the session's history, so ``ember dashboard --history`` shows a stopped cluster's
Serve view and ``/api/serve/applications/``.

Live, each GCS poll hands ``record_poll`` the controller's KV records (``status``,
``decisions`` and the ``request_metrics`` record the view already reads); what changed goes to
the history as one ``serve`` record::

    {"status": {...}, "decisions": [...], "metrics": {...}, "stopped": wall_s}

each key only when it changed: the status and the decisions when they differ from the last
ones recorded; a metrics record when its counters moved, or every ``IDLE_METRICS_S`` when
they did not (so an idle Serve costs a record every 10 s, a busy one one a second);
``stopped`` when Serve was shut down (its KV records are gone) after having run.
``apply`` replays those records into the history dashboard's state, where the Serve routes
read them. A Serve that was shut down keeps its last status in the history, marked with the
time it stopped: the history shows what ran, not an empty page.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

NAMESPACE = "serve"  # the controller's KV namespace (serve/names.py)
STATUS_KEY = b"status"
DECISIONS_KEY = b"decisions"
IDLE_METRICS_S = 10.0


class RecordedServe:
    """What the history knows of Serve: the newest status and decisions, and when Serve was
    shut down (None: it ran until the session ended, or never ran)."""

    def __init__(self) -> None:
        self.status: dict[str, Any] | None = None
        self.decisions: list[dict[str, Any]] | None = None
        self.stopped: float | None = None
        # live only: what was last handed to the history
        self._status_text: str | None = None
        self._decisions_text: str | None = None
        self._metrics_key: str | None = None
        self._metrics_at = 0.0

    def apply(self, st: Any, rec: dict[str, Any]) -> None:
        """One ``serve`` history record into the state."""
        if "status" in rec:
            self.status, self.stopped = rec["status"], None
        if "decisions" in rec:
            self.decisions = rec["decisions"]
        if "metrics" in rec:
            st.serve.add(rec["metrics"])
        if rec.get("stopped") is not None:
            self.stopped = rec["stopped"]


def recorded_of(state: Any) -> RecordedServe:
    """The state's recorded Serve (made on first use; live and history states each have
    their own)."""
    found = getattr(state, "serve_recorded", None)
    if found is None:
        found = state.serve_recorded = RecordedServe()
    return found


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _counters(metrics: dict[str, Any]) -> str:
    """The record without its time: equal when no counter moved."""
    return _text({k: v for k, v in metrics.items() if k != "time"})


async def record_poll(
    st: Any,
    kv_get: Callable[[str, bytes], Awaitable[bytes | None]],
    metrics: Any,
    now: float,
) -> None:
    """Reads the controller's status and decisions (``kv_get(namespace, key)``) and hands what
    changed since the last call, with ``metrics`` (the request-metrics record this poll
    read), to the history as a ``serve`` record."""
    rec = recorded_of(st)
    raw_status = await kv_get(NAMESPACE, STATUS_KEY)
    raw_decisions = await kv_get(NAMESPACE, DECISIONS_KEY)
    body: dict[str, Any] = {}
    if raw_status:
        try:
            status = json.loads(raw_status)
        except ValueError:
            status = None
        if status is not None and raw_status.decode(errors="replace") != rec._status_text:
            rec._status_text = raw_status.decode(errors="replace")
            body["status"] = status
    elif rec._status_text is not None:  # Serve was shut down: its records were deleted
        rec._status_text = rec._decisions_text = rec._metrics_key = None
        body["stopped"] = now
    if raw_decisions and raw_decisions.decode(errors="replace") != rec._decisions_text:
        try:
            body["decisions"] = json.loads(raw_decisions)
            rec._decisions_text = raw_decisions.decode(errors="replace")
        except ValueError:
            pass
    if isinstance(metrics, dict) and isinstance(metrics.get("time"), int | float):
        key = _counters(metrics)
        if key != rec._metrics_key or now - rec._metrics_at >= IDLE_METRICS_S:
            rec._metrics_key, rec._metrics_at = key, now
            body["metrics"] = metrics
    if body:
        st.record("serve", body)
