"""The autoscaler's status record, read: what the monitor writes each tick to the GCS KV
(namespace ``autoscaler``, key ``status``; written by ``ember.autoscaler.status``) turned into
the figures its readers show (``ember status``, the dashboard's Config view, the
``autoscaler_*`` Prometheus families).

The record is the interface between the autoscaler and its readers: nothing here imports
``ember.autoscaler`` (tests/test_import_layers.py), so a reader works against any monitor that
writes the record, and the dashboard never loads the autoscaler's code. Every field is read
defensively (a missing one reads as empty): a newer monitor may add fields, and an older one
may lack some.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ember.masking import mask_secrets

KV_NAMESPACE = "autoscaler"
KV_KEY = b"status"
# The record versions this reader understands (``version`` bumps on a breaking change).
KNOWN_VERSION = 1
# A record older than this means no autoscaler runs (the monitor writes one every tick, a
# second or a few apart): ``ember status`` then shows the cluster as it does without one.
STALE_S = float(os.environ.get("EMBER_AUTOSCALER_STALE_S", "30"))
PENDING_STATES = ("requested", "launching", "joining")
GONE_STATES = ("terminated", "failed")


class RecordError(ValueError):
    """A KV value that is not a status record this reader understands; says which and why."""


def parse(raw: bytes | str | dict[str, Any] | None) -> dict[str, Any] | None:
    """The record from the KV's value (None: the KV holds none). RecordError for a value
    that is not one, or of a version this reader does not know."""
    if raw is None or raw == b"" or raw == "":
        return None
    if isinstance(raw, dict):
        rec = raw
    else:
        try:
            rec = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise RecordError(f"the autoscaler's status record is not JSON: {e}") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("time"), int | float):
        raise RecordError("the autoscaler's status record has no 'time': not a status record")
    version = rec.get("version")
    if version != KNOWN_VERSION:
        raise RecordError(
            f"the autoscaler writes status record version {version!r}; this Ember reads "
            f"version {KNOWN_VERSION}: run the same Ember version on the head and here"
        )
    rec = dict(rec)
    rec["config"] = mask_secrets(rec.get("config") or {})
    return rec


def is_fresh(rec: dict[str, Any] | None, now: float) -> bool:
    return rec is not None and now - float(rec["time"]) <= STALE_S


def _num(value: Any, default: float = 0.0) -> float:
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
    )


def head_type(rec: dict[str, Any]) -> str | None:
    config = rec.get("config") or {}
    name = config.get("head_node_type")
    return str(name) if name else None


def node_types(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """Each node type, head first: min/current/max, pending, failed (kept 10 min), idle,
    and the launch backoff after failures."""
    head = head_type(rec)
    instances = rec.get("instances") or []
    backoff = rec.get("backoff") or {}
    out = []
    for name, t in sorted((rec.get("node_types") or {}).items(), key=lambda kv: kv[0] != head):
        mine = [i for i in instances if i.get("node_type") == name]
        out.append(
            {
                "name": name,
                "is_head": name == head,
                "min_workers": int(_num(t.get("min_workers"))),
                "max_workers": int(_num(t.get("max_workers"))),
                "current": int(_num(t.get("running"))),
                "pending": int(_num(t.get("pending"))),
                "failed": sum(1 for i in mine if i.get("state") == "failed"),
                "idle": sum(1 for i in mine if i.get("state") == "running" and i.get("idle_since")),
                "resources": t.get("resources") or {},
                # Launches of this type wait until then, after failures (None: they don't).
                "backoff_until": (backoff.get(name) or {}).get("until"),
                "backoff_failures": int(_num((backoff.get(name) or {}).get("failures"))),
            }
        )
    return out


def pending_launches(rec: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in rec.get("instances") or [] if i.get("state") in PENDING_STATES]


def failures(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """Launch failures, newest first: the failed instances (with their error) and the
    ``failed`` decisions of instances the record no longer lists."""
    failed = [i for i in rec.get("instances") or [] if i.get("state") == "failed"]
    out = [
        {
            "time": _num(i.get("since")),
            "node_type": i.get("node_type"),
            "instance_id": i.get("instance_id"),
            "error": i.get("error") or "failed",
        }
        for i in failed
    ]
    listed = {i.get("instance_id") for i in failed}
    for d in rec.get("decisions") or []:
        if d.get("action") == "failed" and (
            not d.get("instance_id") or d["instance_id"] not in listed
        ):
            out.append(
                {
                    "time": _num(d.get("time")),
                    "node_type": d.get("node_type"),
                    "instance_id": d.get("instance_id"),
                    "error": d.get("reason") or "failed",
                }
            )
    return sorted(out, key=lambda f: -f["time"])


def idle_timers(rec: dict[str, Any], now: float) -> list[dict[str, Any]]:
    """Running instances that are idle: how long, and in how long the idle timeout ends
    them (0: due now; the autoscaler drains it first)."""
    timeout = _num(rec.get("idle_timeout_s"), 300.0)
    out = []
    for i in rec.get("instances") or []:
        since = i.get("idle_since")
        if i.get("state") != "running" or not isinstance(since, int | float):
            continue
        idle = max(now - since, 0.0)
        out.append({**i, "idle_for_s": idle, "stops_in_s": max(timeout - idle, 0.0)})
    return out


def pending_resources(rec: dict[str, Any]) -> dict[str, float]:
    """The resources of the nodes being launched (Ray's ``autoscaler_pending_resources``)."""
    types = rec.get("node_types") or {}
    out: dict[str, float] = {}
    for i in pending_launches(rec):
        for name, amount in ((types.get(i.get("node_type")) or {}).get("resources") or {}).items():
            out[name] = out.get(name, 0.0) + _num(amount)
    return out


def summary(rec: dict[str, Any], now: float) -> dict[str, Any]:
    """The record with the figures its readers compute, at ``now``."""
    return {
        "fresh": is_fresh(rec, now),
        "age_s": max(now - float(rec["time"]), 0.0),
        "stale_after_s": STALE_S,
        "node_types_view": node_types(rec),
        "pending_launches": pending_launches(rec),
        "idle_timers": idle_timers(rec, now),
        "failures": failures(rec),
        "pending_resources": pending_resources(rec),
        "record": rec,
    }
