"""Request counters kept where requests are handled: the proxy per route, each replica per
route. Bounded: a count, an error count and a fixed-bucket latency histogram (Ray Serve's
default millisecond boundaries) per key, never a list of requests; recording one costs a few
increments and a bisect.

The controller asks the proxy and every running replica for their ``snapshot()`` about once
a second and writes them to the GCS KV (namespace ``serve``, key ``request_metrics``) as JSON::

    {"time": wall_s,
     "buckets_ms": [1, 2, 5, ...],           # upper bounds; one more count for +Inf
     "proxy": {"node_id": ..., "routes": {key: SERIES}},
     "replicas": {tag: {"app": ..., "deployment": ..., "actor_name": ..., "node_id": ...,
                        "actor_id": ..., "pid": n, "ongoing": n, "routes": {key: SERIES}}},
     "retired": {app: {deployment: {"count": n, "errors": n, "sum_ms": x, "buckets": [...]}}}}

where ``SERIES`` is ``{"route": ..., "app": ..., "method": ..., "status": n, "count": n,
"errors": n, "sum_ms": x, "buckets": [n, ...]}`` (per-bucket counts, not cumulative). On the
proxy, a series is one (route prefix, HTTP method, status code); on a replica, one route
(the proxy's route prefix, or the method name for handle calls) with method and status
empty. An error is a status >= 400 at the proxy, an exception (or a 5xx) at a replica. Counts
only grow for the life of the process that keeps them; ``retired`` holds, per deployment, the
last counts collected from its replicas that are gone (``metrics_collector``), so a
deployment's sum over ``replicas`` and ``retired`` only grows while it exists. The dashboard
(which does not import this package) derives rates and percentiles from the differences of
those sums.
"""

from __future__ import annotations

import bisect
from typing import Any

# Ray Serve's DEFAULT_LATENCY_BUCKET_MS (serve/_private/constants.py), so histograms compare.
BUCKETS_MS: tuple[float, ...] = (
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    300,
    400,
    500,
    1000,
    2000,
    5000,
    10000,
    60000,
    120000,
    300000,
    600000,
)
MAX_SERIES = 512  # distinct (route, method, status) kept per process; more fold into "other"


class RequestStats:
    """Request counters and latency histograms of one process, one series per distinct
    (route, method, status) it saw."""

    def __init__(self) -> None:
        self.series: dict[str, dict[str, Any]] = {}

    def _get(self, route: str, app: str, method: str, status: int) -> dict[str, Any]:
        key = f"{method} {status} {route}"
        s = self.series.get(key)
        if s is None:
            if len(self.series) >= MAX_SERIES:
                key, route = "other", "other"
                s = self.series.get(key)
            if s is None:
                s = {
                    "route": route,
                    "app": app,
                    "method": method,
                    "status": status,
                    "count": 0,
                    "errors": 0,
                    "sum_ms": 0.0,
                    "buckets": [0] * (len(BUCKETS_MS) + 1),
                }
                self.series[key] = s
        return s

    def record(
        self, route: str, app: str, ms: float, error: bool, method: str = "", status: int = 0
    ) -> None:
        s = self._get(route, app, method, status)
        s["count"] += 1
        s["errors"] += error
        s["sum_ms"] += ms
        s["buckets"][bisect.bisect_left(BUCKETS_MS, ms)] += 1

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {k: {**s, "buckets": list(s["buckets"])} for k, s in self.series.items()}
