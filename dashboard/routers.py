"""Every router the dashboard mounts, in one list: a feature adds its router here (one line).

Each entry is ``(module path, attribute)`` imported lazily, so a feature whose module is
absent on this branch (e.g. Prometheus before part B merges) is simply not mounted.
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
    ("ember.dashboard.routes.stream", "router"),
    ("ember.dashboard.prometheus", "router"),
    ("ember.dashboard.timeline", "router"),
    ("ember.dashboard.routes_frontend", "router"),  # the browser app's own queries (issue 5)
    # The frontend's catch-all goes last so every API route wins over it.
    ("ember.dashboard.routes.frontend", "router"),
]
