"""Serve's request figures as metric families, from the newest ``request_metrics`` record while
Serve runs (the record is fresh), in the two name sets ``/metrics`` serves:

- ``?compat=ray``: Ray Serve's families, with the names, types and labels of Ray 2.60's
  ``serve/_private/request_ingress_metrics.py`` (the proxy's ``serve_num_http_requests``,
  ``serve_num_http_error_requests``, ``serve_http_request_latency_ms``) and ``replica.py``
  (``serve_deployment_request_counter``, ``serve_deployment_processing_latency_ms``,
  ``serve_replica_processing_queries``, with the replica's default labels ``deployment``,
  ``replica``, ``application``), prefixed ``ray_`` and labelled ``SessionName`` as Ray's
  metrics agent exports them, so Ray's Serve Grafana panels plot an Ember cluster;
- plain ``/metrics``: the same figures as ``ember_serve_*`` without ``SessionName``, named
  to pass ``promtool check metrics`` (which rejects Ray's ``_ms`` and ``_counter``): the
  latencies in seconds (``ember_serve_http_request_latency_seconds``,
  ``ember_serve_deployment_processing_latency_seconds``) and
  ``ember_serve_deployment_requests`` for the request counter.

The counts are since each process started (the proxy, each replica), as Ray's are.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

# Ray's name -> Ember's, where promtool's lint refuses Ray's
EMBER_NAMES = {
    "serve_http_request_latency_ms": "serve_http_request_latency_seconds",
    "serve_deployment_processing_latency_ms": "serve_deployment_processing_latency_seconds",
    "serve_deployment_request_counter": "serve_deployment_requests",
}
STALE_AFTER_S = 10.0  # the controller writes a record each second; older: Serve stopped


def fresh_record(st: Any) -> dict[str, Any] | None:
    rec = st.serve.latest()
    return rec if rec is not None and st.clock() - rec["time"] <= STALE_AFTER_S else None


def _buckets(bounds: list[float], counts: list[int], scale: float) -> list[tuple[str, float]]:
    out, running = [], 0
    for bound, c in zip(bounds, counts, strict=False):
        running += c
        out.append((repr(float(bound) * scale), float(running)))
    out.append(("+Inf", float(sum(counts))))
    return out


def metrics(rec: dict[str, Any], session: str | None) -> Iterator[Metric]:
    """Every family from one record: Ray's names with ``session`` (its ``SessionName``), or
    Ember's (``ember_serve_*``) when None."""
    ray = session is not None
    scale = 1.0 if ray else 0.001  # Ember's latencies are in seconds

    def name(ray_name: str) -> str:
        return "ray_" + ray_name if ray else "ember_" + EMBER_NAMES.get(ray_name, ray_name)

    common = ["SessionName"] if ray else []
    extra = [session] if ray else []
    bounds = rec.get("buckets_ms") or []

    http = ["route", "method", "application", "status_code", *common]
    requests = CounterMetricFamily(
        name("serve_num_http_requests"), "The number of HTTP requests processed.", labels=http
    )
    errors = CounterMetricFamily(
        name("serve_num_http_error_requests"),
        "The number of errored HTTP responses.",
        labels=["route", "error_code", "method", "application", *common],
    )
    latency = HistogramMetricFamily(
        name("serve_http_request_latency_ms"),
        "The end-to-end latency of HTTP requests (measured from the Serve HTTP proxy).",
        labels=["method", "route", "application", "status_code", *common],
    )
    for s in ((rec.get("proxy") or {}).get("routes") or {}).values():
        route, method, app, code = s["route"], s["method"], s["app"], str(s["status"])
        requests.add_metric([route, method, app, code, *extra], float(s["count"]))
        if s["errors"]:
            errors.add_metric([route, code, method, app, *extra], float(s["errors"]))
        latency.add_metric(
            [method, route, app, code, *extra],
            _buckets(bounds, s["buckets"], scale),
            s["sum_ms"] * scale,
        )
    yield from (requests, errors, latency)

    per_replica = ["deployment", "replica", "application", *common]
    counter = CounterMetricFamily(
        name("serve_deployment_request_counter"),
        "The number of queries that have been processed in this replica.",
        labels=["route", *per_replica],
    )
    processing = HistogramMetricFamily(
        name("serve_deployment_processing_latency_ms"),
        "The latency for queries to be processed.",
        labels=["route", *per_replica],
    )
    ongoing = GaugeMetricFamily(
        name("serve_replica_processing_queries"),
        "The current number of queries being processed.",
        labels=per_replica,
    )
    for tag, r in sorted((rec.get("replicas") or {}).items()):
        who = [r.get("deployment", ""), tag, r.get("app", ""), *extra]
        ongoing.add_metric(who, float(r.get("ongoing") or 0))
        by_route: dict[str, dict[str, Any]] = {}
        for s in (r.get("routes") or {}).values():  # a replica's series differ by route only
            acc = by_route.setdefault(
                s["route"], {"count": 0, "sum_ms": 0.0, "buckets": [0] * len(s["buckets"])}
            )
            acc["count"] += s["count"]
            acc["sum_ms"] += s["sum_ms"]
            acc["buckets"] = [a + b for a, b in zip(acc["buckets"], s["buckets"], strict=False)]
        for route, acc in sorted(by_route.items()):
            counter.add_metric([route, *who], float(acc["count"]))
            processing.add_metric(
                [route, *who], _buckets(bounds, acc["buckets"], scale), acc["sum_ms"] * scale
            )
    yield from (counter, processing, ongoing)
