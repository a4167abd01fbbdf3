"""What the Serve page shows (``GET /api/serve/view``): each application (status, route
prefix), its deployments (status, replicas target/running, request rate, error rate and
latency percentiles over the last ``WINDOW_S`` with per-second series for charts, requests
since the deployment was deployed), its replicas (state, node, actor, pid) and the controller's
recent decisions with their reasons; all from the controller's KV records."""

from __future__ import annotations

from typing import Any

from ember.dashboard.serve import view


def _deployment(
    app: str, name: str, d: dict[str, Any], win: dict, charts: dict, total: dict
) -> dict[str, Any]:
    key = (app, name)
    replicas = d.get("replicas") or []
    empty = view.figures({"count": 0, "errors": 0, "sum_ms": 0.0, "buckets": []}, 0.0, [])
    return {
        "name": name,
        "status": d.get("status"),
        "message": d.get("message", ""),
        "target_replicas": d.get("target_num_replicas", 0),
        "running_replicas": sum(1 for r in replicas if r.get("state") == "RUNNING"),
        "window": win.get(key) or empty,
        "series": charts.get(key, []),
        "requests_total": (total.get(key) or {}).get("count", 0),
        "errors_total": (total.get(key) or {}).get("errors", 0),
        "replicas": [
            {
                "replica_id": r.get("replica_id"),
                "state": r.get("state"),
                "node_id": r.get("node_id"),
                "actor_id": r.get("actor_id"),
                "actor_name": r.get("actor_name"),
                "pid": r.get("pid"),
                "start_time_s": r.get("start_time_s"),
            }
            for r in replicas
        ],
    }


def serve_view(
    status: dict[str, Any] | None,
    decisions: list[dict[str, Any]] | None,
    metrics: view.ServeMetrics,
    window_s: float = view.WINDOW_S,
) -> dict[str, Any]:
    samples = list(metrics.samples)
    win = view.window_figures(samples, window_s)
    charts = view.series(samples)
    total = view.totals(metrics.latest())
    apps = []
    for name, a in sorted(((status or {}).get("applications") or {}).items()):
        apps.append(
            {
                "name": name,
                "status": a.get("status"),
                "message": a.get("message", ""),
                "route_prefix": a.get("route_prefix"),
                "ingress": a.get("ingress"),
                "deployments": [
                    _deployment(name, dname, d, win, charts, total)
                    for dname, d in sorted((a.get("deployments") or {}).items())
                ],
            }
        )
    latest = metrics.latest() or {}
    return {
        "running": status is not None,
        "window_s": window_s,
        "metrics_time": latest.get("time"),
        "applications": apps,
        "proxies": (status or {}).get("proxies") or {},
        "decisions": list(reversed(decisions or []))[:50],  # newest first
    }
