"""The cluster event log: node joins and deaths, actor restarts and deaths, newest last.
``ember status`` and the dashboard read it through ``get_events``.
"""

from __future__ import annotations

import time
from typing import Any

_MAX_EVENTS = 10_000  # past this the oldest 1,000 go, so a long-lived cluster stays bounded


class EventLog:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def record(self, severity: str, message: str) -> None:
        self.events.append({"time": time.time(), "severity": severity, "message": message})
        if len(self.events) > _MAX_EVENTS:
            del self.events[:1000]

    def h_get_events(self, conn: Any, body: Any) -> list[dict]:
        return list(self.events)
