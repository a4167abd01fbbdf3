"""Every router the dashboard mounts, in one list: a feature adds its router here (one line).

Each entry is ``(module path, attribute)`` imported lazily, so a feature whose module is
absent (its optional dependency not installed) is simply not mounted.
"""

from __future__ import annotations

ROUTERS: list[tuple[str, str]] = [
    ("ember.dashboard.routes.meta", "router"),
    ("ember.dashboard.routes.nodes", "router"),
    ("ember.dashboard.routes.actors", "router"),
    ("ember.dashboard.routes.tasks", "router"),
    ("ember.dashboard.routes.objects", "router"),
    ("ember.dashboard.routes.logs", "router"),
    ("ember.dashboard.routes.diagnostics", "router"),
    ("ember.dashboard.routes.events", "router"),
    ("ember.dashboard.routes.placement_groups", "router"),
    ("ember.dashboard.routes.stream", "router"),
    ("ember.dashboard.routes.state_v0", "router"),  # Ray's state API, for Ray's own clients
    ("ember.dashboard.routes.jobs", "router"),  # Ray's Jobs API (submit, logs, stop)
    ("ember.dashboard.tune.routes", "router"),  # the Tune view (experiments, trials, stop)
    ("ember.dashboard.serve.routes", "router"),  # Ray Serve's REST API (serve deploy/status)
    ("ember.dashboard.prometheus", "router"),
    ("ember.dashboard.routes.timeline", "router"),
    ("ember.dashboard.routes.metrics_history", "router"),  # the Metrics page's histories
    ("ember.dashboard.autoscaler.routes", "router"),  # the Config view's autoscaler status
    ("ember.dashboard.routes_frontend", "router"),  # the browser app's own queries
    ("ember.dashboard.routes.api_docs", "router"),  # /docs and /redoc, their assets local
    # The frontend's catch-all goes last so every API route wins over it.
    ("ember.dashboard.routes.frontend", "router"),
]
