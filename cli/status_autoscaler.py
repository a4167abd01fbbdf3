"""``ember status``'s autoscaler section, as ``ray status`` lays it out (Ray's
``autoscaler/_private/util.py`` ``format_info_string``): the node status by node type
(active, idle, pending launches, recent failures) and the ``request_resources`` floor, read
from the autoscaler's status record in the GCS KV. Shown only while an autoscaler runs (its
record is fresh); without one, ``ember status`` is what it always was.

The record is the interface: this module reads it through ``ember.dashboard.autoscaler.record``
and never imports ``ember.autoscaler``.
"""

from __future__ import annotations

import time
from typing import Any

from ember.dashboard.autoscaler import record as rec_mod
from ember.resources import fmt as fmt_shape

# Ray shows this many recent failures at most (AUTOSCALER_MAX_FAILURES_DISPLAYED).
MAX_FAILURES = 20


def autoscaler_section(raw: Any, now: float) -> dict[str, Any] | None:
    """The section's figures as plain data (``ember status --format json``'s
    ``autoscaler``), or None when no autoscaler runs now (no record, a stale one, or one
    this version cannot read)."""
    try:
        rec = rec_mod.parse(raw)
    except rec_mod.RecordError:
        return None
    if rec is None or not rec_mod.is_fresh(rec, now):
        return None
    instances = rec.get("instances") or []
    requested: dict[str, dict[str, Any]] = {}
    for bundle in (rec.get("demand") or {}).get("request_resources") or []:
        shape = {k: float(v) for k, v in bundle.items() if v}
        entry = requested.setdefault(repr(sorted(shape.items())), {"shape": shape, "count": 0})
        entry["count"] += 1
    types = rec_mod.node_types(rec)
    return {
        "cluster_name": rec.get("cluster_name") or "",
        "now": now,
        "record_time": rec["time"],
        "node_types": types,
        "active": [i for i in instances if i.get("state") in ("running", "draining")],
        "idle": rec_mod.idle_timers(rec, now),
        "pending": rec_mod.pending_launches(rec),
        "failures": rec_mod.failures(rec)[:MAX_FAILURES],
        "request_resources": list(requested.values()),
        "infeasible": rec.get("infeasible") or [],
        "node_type_resources": [t["resources"] for t in types if t["resources"]],
    }


def _where(i: dict[str, Any]) -> str:
    node = f"node_{i['node_id']}" if i.get("node_id") else i.get("instance_id") or "?"
    return f"{node} ({i['ip']})" if i.get("ip") else node


def node_status_lines(section: dict[str, Any]) -> list[str]:
    """Active, Idle, Pending and Recent failures, by node type, with the nodes' ids."""
    out = ["Active:"]
    active = [t for t in section["node_types"] if t["current"]]
    for t in active:
        ids = [_where(i) for i in section["active"] if i.get("node_type") == t["name"]]
        out.append(f" {t['current']} {t['name']}" + (f": {', '.join(ids)}" if ids else ""))
    if not active:
        out.append(" (no active nodes)")
    out.append("Idle:")
    for i in section["idle"]:
        out.append(
            f" {i.get('node_type')}: {_where(i)}, idle {i['idle_for_s']:.0f} s, "
            f"removed in {i['stops_in_s']:.0f} s"
        )
    if not section["idle"]:
        out.append(" (no idle nodes)")
    out.append("Pending:")
    for i in section["pending"]:
        out.append(f" {i.get('ip') or i.get('instance_id')}: {i.get('node_type')}, {i['state']}")
    if not section["pending"]:
        out.append(" (no pending nodes)")
    now = section["now"]
    for t in section["node_types"]:  # after failures, launches of a type wait a while
        until = t.get("backoff_until")
        if isinstance(until, int | float) and until > now:
            n = t["backoff_failures"]
            out.append(
                f" {t['name']}: launches back off for {until - now:.0f} s more "
                f"(after {n} failure{'s' if n != 1 else ''})"
            )
    out.append("Recent failures:")
    for f in section["failures"]:
        when = time.strftime("%H:%M:%S", time.localtime(f["time"])) if f["time"] else "?"
        inst = f", instance {f['instance_id']}" if f.get("instance_id") else ""
        out.append(f" {f['node_type']}: {f['error']} (latest_attempt: {when}{inst})")
    if not section["failures"]:
        out.append(" (no failures)")
    return out


def request_lines(section: dict[str, Any]) -> list[str]:
    """``From request_resources:``, as Ray prints it."""
    lines = [
        f" {fmt_shape(r['shape'])}: {r['count']} from request_resources()"
        for r in section["request_resources"]
    ]
    return ["From request_resources:", *(lines or [" (none)"])]
