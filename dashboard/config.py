"""The dashboard's tunables, each overridable by an ``EMBER_DASHBOARD_<NAME>`` variable.

Every store is bounded, so a busy cluster cannot grow the dashboard without limit: these caps say how much the dashboard keeps, and the store
counts what it dropped past them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def _env(name: str, default, cast=None):
    raw = os.environ.get("EMBER_DASHBOARD_" + name.upper())
    if raw is None:
        return default
    return (cast or type(default))(raw)


@dataclass
class Caps:
    """Upper bounds of the in-memory state; the oldest entry goes first past a cap."""

    max_tasks: int = field(default_factory=lambda: _env("max_tasks", 1_000_000))
    max_actors: int = field(default_factory=lambda: _env("max_actors", 100_000))
    max_events: int = field(default_factory=lambda: _env("max_events", 10_000))
    max_nodes: int = field(default_factory=lambda: _env("max_nodes", 2_000))
    max_workers_per_node: int = field(default_factory=lambda: _env("max_workers_per_node", 1_000))
    max_objects_per_node: int = field(default_factory=lambda: _env("max_objects_per_node", 100_000))
    # Metric history: 30 minutes at the agents' 2 s period (the charts' window).
    history_seconds: float = field(default_factory=lambda: _env("history_seconds", 1800.0))
    history_period: float = field(default_factory=lambda: _env("history_period", 2.0))
    # Seconds after a job ends before its tasks still open are failed (its driver's and
    # workers' last task events may still be on their way).
    job_end_grace: float = field(default_factory=lambda: _env("job_end_grace", 5.0))
    # Live-stream messages waiting for one slow client before the oldest are dropped.
    stream_queue: int = field(default_factory=lambda: _env("stream_queue", 1_000))
