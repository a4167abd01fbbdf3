"""Serve's request figures, from the controller's ``request_metrics`` KV record (its format is
in ``serve/request_metrics.py``; the dashboard does not import the library, the record is the
contract). The GCS poller hands each new record to ``ServeMetrics.add``; the view keeps the
last ``MAX_SAMPLES`` and derives rates and latency percentiles from the differences of the
counters between two of them, as Prometheus' ``rate`` and ``histogram_quantile`` would.

Each deployment's counters are summed over its replicas and its ``retired`` totals (the
replicas that are gone) in each record, and the differences are taken of those sums: a
replica that started between two records counts from zero, and one that was replaced is in
``retired``, so a deployment's counts, and its rate, never go backwards. A sum that does go
backwards (a record without ``retired``) gives a zero difference, never a negative rate.
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


def _sum_into(acc: dict[str, Any], series: dict[str, Any]) -> None:
    acc["count"] += series.get("count", 0)
    acc["errors"] += series.get("errors", 0)
    acc["sum_ms"] += series.get("sum_ms", 0.0)
    for i, c in enumerate(series.get("buckets") or []):
        if i < len(acc["buckets"]):
            acc["buckets"][i] += c


def deployment_sums(record: dict[str, Any] | None) -> dict[tuple, dict]:
    """{(app, deployment): its counters summed over every replica and route of ``record``,
    plus its retired replicas'}: what it has handled since it was deployed."""
    if not record:
        return {}
    n = len(record.get("buckets_ms") or []) + 1
    out: dict[tuple, dict] = {}
    for r in (record.get("replicas") or {}).values():
        acc = out.setdefault((r.get("app"), r.get("deployment")), _zero(n))
        for series in (r.get("routes") or {}).values():
            _sum_into(acc, series)
    for app, deployments in (record.get("retired") or {}).items():
        for name, series in (deployments or {}).items():
            _sum_into(out.setdefault((app, name), _zero(n)), series)
    return out


def deployment_deltas(new: dict[str, Any], old: dict[str, Any] | None) -> dict[tuple, dict]:
    """{(app, deployment): counter differences} between two records (``old`` None: since
    each deployment was deployed)."""
    before = deployment_sums(old)
    out: dict[tuple, dict] = {}
    for key, now in deployment_sums(new).items():
        was = before.get(key) or {}
        wb = was.get("buckets") or []
        out[key] = {
            "count": max(0, now["count"] - was.get("count", 0)),
            "errors": max(0, now["errors"] - was.get("errors", 0)),
            "sum_ms": max(0.0, now["sum_ms"] - was.get("sum_ms", 0.0)),
            "buckets": [
                max(0, c - (wb[i] if i < len(wb) else 0)) for i, c in enumerate(now["buckets"])
            ],
        }
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
    """Each deployment's counts since it was deployed (the newest record alone), its
    replaced replicas' included."""
    return deployment_sums(record)
