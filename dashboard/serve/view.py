"""Serve's request figures, from the controller's ``request_metrics`` KV record (its format is
in ``serve/request_metrics.py``; the dashboard does not import the library, the record is the
contract). The GCS poller hands each new record to ``ServeMetrics.add``; the view keeps the
last ``MAX_SAMPLES`` and derives rates and latency percentiles from the differences of the
counters between two of them, as Prometheus' ``rate`` and ``histogram_quantile`` would.

A replica missing from the older sample (started since) counts from zero; one missing from the
newer (stopped) drops out, so a deployment's rate never goes negative.
"""

from __future__ import annotations

from collections import deque
from typing import Any

KV_KEY = b"request_metrics"  # namespace "serve" (serve/names.py KV_REQUEST_METRICS)
MAX_SAMPLES = 120  # about two minutes at the controller's one record a second
WINDOW_S = 30.0  # the rates' window
CHART_S = 60.0  # how far back the per-second series go


class ServeMetrics:
    """The newest request-metrics records, oldest first, bounded."""

    def __init__(self) -> None:
        self.samples: deque[dict[str, Any]] = deque(maxlen=MAX_SAMPLES)

    def add(self, record: Any) -> None:
        if not isinstance(record, dict) or not isinstance(record.get("time"), int | float):
            return
        if self.samples and record["time"] <= self.samples[-1]["time"]:
            return  # the same record polled again (or a restarted controller's clock went back)
        self.samples.append(record)

    def latest(self) -> dict[str, Any] | None:
        return self.samples[-1] if self.samples else None


def quantile(q: float, bounds: list[float], counts: list[float]) -> float | None:
    """The ``q`` quantile (ms) of a histogram's bucket counts (one more than ``bounds``, the
    last +Inf), interpolated linearly inside the bucket it falls in; None without counts."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0.0
    for i, c in enumerate(counts):
        if c > 0 and seen + c >= rank:
            if i >= len(bounds):
                return float(bounds[-1])  # past the last bound: its lower edge, as Prometheus
            lower = 0.0 if i == 0 else float(bounds[i - 1])
            return lower + (float(bounds[i]) - lower) * (rank - seen) / c
        seen += c
    return float(bounds[-1])


def _zero(n: int) -> dict[str, Any]:
    return {"count": 0, "errors": 0, "sum_ms": 0.0, "buckets": [0] * n}


def _add(acc: dict[str, Any], new: dict[str, Any], old: dict[str, Any] | None) -> None:
    old = old or {}
    acc["count"] += max(0, new.get("count", 0) - old.get("count", 0))
    acc["errors"] += max(0, new.get("errors", 0) - old.get("errors", 0))
    acc["sum_ms"] += max(0.0, new.get("sum_ms", 0.0) - old.get("sum_ms", 0.0))
    ob = old.get("buckets") or []
    for i, c in enumerate(new.get("buckets") or []):
        if i < len(acc["buckets"]):
            acc["buckets"][i] += max(0, c - (ob[i] if i < len(ob) else 0))


def deployment_deltas(new: dict[str, Any], old: dict[str, Any] | None) -> dict[tuple, dict]:
    """{(app, deployment): summed counter differences} between two records over every
    replica and route (``old`` None: since each replica started)."""
    n = len(new.get("buckets_ms") or []) + 1
    out: dict[tuple, dict] = {}
    old_replicas = (old or {}).get("replicas") or {}
    for tag, r in (new.get("replicas") or {}).items():
        key = (r.get("app"), r.get("deployment"))
        acc = out.setdefault(key, _zero(n))
        before = (old_replicas.get(tag) or {}).get("routes") or {}
        for route, series in (r.get("routes") or {}).items():
            _add(acc, series, before.get(route))
    return out


def figures(delta: dict[str, Any], seconds: float, bounds: list[float]) -> dict[str, Any]:
    """Rate (requests/s), error rate (errors/s), error ratio and p50/p95/p99 (ms)."""
    count = delta["count"]
    return {
        "requests": count,
        "errors": delta["errors"],
        "rate": count / seconds if seconds > 0 else 0.0,
        "error_rate": delta["errors"] / seconds if seconds > 0 else 0.0,
        "error_ratio": delta["errors"] / count if count else 0.0,
        "p50_ms": quantile(0.50, bounds, delta["buckets"]),
        "p95_ms": quantile(0.95, bounds, delta["buckets"]),
        "p99_ms": quantile(0.99, bounds, delta["buckets"]),
        "mean_ms": delta["sum_ms"] / count if count else None,
    }


def window_figures(samples: list[dict[str, Any]], window_s: float = WINDOW_S) -> dict[tuple, dict]:
    """Each deployment's figures over the newest ``window_s`` of ``samples`` (oldest first):
    between the newest sample and the oldest one still inside the window."""
    if len(samples) < 2:
        return {}
    newest = samples[-1]
    base = next(s for s in samples if s["time"] >= newest["time"] - window_s)
    if base is newest:
        base = samples[-2]
    bounds = newest.get("buckets_ms") or []
    seconds = newest["time"] - base["time"]
    return {key: figures(d, seconds, bounds) for key, d in deployment_deltas(newest, base).items()}


def series(samples: list[dict[str, Any]], chart_s: float = CHART_S) -> dict[tuple, list]:
    """Per deployment, ``[time, rate, error_rate, p50_ms, p99_ms]`` between each two
    consecutive samples of the newest ``chart_s``: the page's small live charts."""
    if not samples:
        return {}
    start = samples[-1]["time"] - chart_s
    recent = [s for s in samples if s["time"] >= start]
    out: dict[tuple, list] = {}
    for old, new in zip(recent, recent[1:], strict=False):
        bounds = new.get("buckets_ms") or []
        seconds = new["time"] - old["time"]
        for key, d in deployment_deltas(new, old).items():
            f = figures(d, seconds, bounds)
            out.setdefault(key, []).append(
                [new["time"], f["rate"], f["error_rate"], f["p50_ms"], f["p99_ms"]]
            )
    return out


def totals(record: dict[str, Any] | None) -> dict[tuple, dict]:
    """Each deployment's counts since its replicas started (the newest record alone)."""
    if not record:
        return {}
    return deployment_deltas(record, None)
