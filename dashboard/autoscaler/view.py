"""The dashboard's copy of the autoscaler's status record (``record.py``), polled from the
GCS KV with the rest of the GCS's state (``gcs_client.apply_gcs_poll``, live or replayed from
the session's history), and what only the dashboard keeps beyond the newest record:

- the cluster's size over time (the Config view's chart), a bounded ring;
- each scaling decision once, as a cluster event (the Events page, ``source="autoscaler"``)
  and as an instant on the timeline's ``autoscaler`` row. The record carries the last 200
  decisions every tick, so a decision is new when its (time, action, node type, instance)
  was not seen before.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ember.dashboard.autoscaler import record as rec_mod

# The size chart's ring: one point per change, and one at least every SIZE_EVERY_S while
# nothing changes (a flat line needs its points too); 2,000 points cover the dashboard's
# 30-minute history at a change a second.
MAX_SIZE_POINTS = 2000
SIZE_EVERY_S = 10.0
# Decisions remembered for deduplication (more than the record's 200, so none comes back).
MAX_SEEN = 1000
# How often an unchanged record is written to the session's history anyway, so a replay's
# record stays fresh (``STALE_S``) and its chart has points while nothing changes.
RECORD_EVERY_S = 10.0
TIMELINE_ROW = "autoscaler"  # the timeline's row (a "process") of scaling decisions

_SEVERITY = {"failed": "ERROR", "infeasible": "WARNING", "backoff": "WARNING"}
_VERB = {
    "launch": "launching",
    "terminate": "terminating",
    "drain": "draining",
    "failed": "failed to launch",
    "infeasible": "cannot place demand on",
    "backoff": "backing off launches of",
}


def decision_message(d: dict[str, Any]) -> str:
    """One decision as the event list says it: what, how many of which type, why."""
    action = str(d.get("action") or "?")
    count = int(d.get("count") or 1)
    what = f"{count} {d.get('node_type') or '?'} node{'s' if count != 1 else ''}"
    if action in ("infeasible", "backoff"):
        what = str(d.get("node_type") or "any node type")
    inst = f" ({d['instance_id']})" if d.get("instance_id") else ""
    reason = f": {d['reason']}" if d.get("reason") else ""
    return f"autoscaler {_VERB.get(action, action)} {what}{inst}{reason}"


class AutoscalerView:
    """The newest record and the history around it; fed by ``apply``, on the dashboard's loop."""

    def __init__(self) -> None:
        self.record: dict[str, Any] | None = None
        self.error: str | None = None  # why the KV's value could not be read
        self.sizes: deque[dict[str, Any]] = deque(maxlen=MAX_SIZE_POINTS)
        self._seen: set[tuple] = set()
        self._seen_order: deque[tuple] = deque()
        self._recorded_at = float("-inf")
        self._recorded_key: Any = None

    def apply(self, st: Any, raw: Any, now: float) -> None:
        """One poll's value of the KV key (bytes, a dict from the history, or None)."""
        try:
            rec = rec_mod.parse(raw)
        except rec_mod.RecordError as e:
            self.error = str(e)
            return
        self.error = None
        if rec is None:
            return
        self.record = rec
        self._add_size(rec, now)
        for d in rec.get("decisions") or []:
            key = (d.get("time"), d.get("action"), d.get("node_type"), d.get("instance_id"))
            if key in self._seen:
                continue
            self._remember(key)
            self._publish(st, d)

    def worth_recording(self, rec_raw: Any, now: float) -> bool:
        """Whether this poll's value goes into the session's history: when it changed (its
        tick time and usage aside), or RECORD_EVERY_S after the last one written."""
        if not isinstance(rec_raw, dict):
            return False
        key = (
            rec_raw.get("instances"),
            rec_raw.get("decisions"),
            rec_raw.get("node_types"),
            rec_raw.get("demand"),
            rec_raw.get("infeasible"),
        )
        key = repr(key)
        if key == self._recorded_key and now - self._recorded_at < RECORD_EVERY_S:
            return False
        self._recorded_key, self._recorded_at = key, now
        return True

    def _remember(self, key: tuple) -> None:
        self._seen.add(key)
        self._seen_order.append(key)
        while len(self._seen_order) > MAX_SEEN:
            self._seen.discard(self._seen_order.popleft())

    def _publish(self, st: Any, d: dict[str, Any]) -> None:
        t = d.get("time") if isinstance(d.get("time"), int | float) else None
        message = decision_message(d)
        st.add_event(
            _SEVERITY.get(str(d.get("action")), "INFO"),
            message,
            source="autoscaler",
            kind=f"AUTOSCALER_{str(d.get('action') or '').upper()}",
            t=t,
        )
        st.timeline.add_mark(
            TIMELINE_ROW,
            f"{d.get('action')} {d.get('node_type') or ''}".strip(),
            "autoscaler",
            t or st.clock(),
            {"reason": str(d.get("reason") or ""), "instance_id": str(d.get("instance_id") or "")},
        )

    def _add_size(self, rec: dict[str, Any], now: float) -> None:
        types = rec.get("node_types") or {}
        by_type = {name: int(t.get("running") or 0) for name, t in types.items()}
        pending = sum(int(t.get("pending") or 0) for t in types.values())
        t = float(rec["time"])
        last = self.sizes[-1] if self.sizes else None
        if last is not None:
            if t <= last["time"]:
                return  # the same tick polled again
            same = last["by_type"] == by_type and last["pending"] == pending
            if same and t - last["time"] < SIZE_EVERY_S:
                return
        self.sizes.append(
            {"time": t, "total": sum(by_type.values()), "pending": pending, "by_type": by_type}
        )

    def status(self, now: float) -> dict[str, Any]:
        """``GET /api/autoscaler/status``: the record and the figures computed from it."""
        out: dict[str, Any] = {"present": self.record is not None, "error": self.error}
        if self.record is not None:
            out.update(rec_mod.summary(self.record, now))
        else:
            out.update(fresh=False, record=None, stale_after_s=rec_mod.STALE_S)
        out["sizes"] = list(self.sizes)
        return out
