"""``with ember.profile("name"):`` records a span that the timeline shows inside the task."""

from __future__ import annotations

import time
from typing import Any

from ember import global_state


class profile:  # noqa: N801 - Ray's spelling
    def __init__(self, event_type: str, extra_data: dict[str, Any] | None = None) -> None:
        self.event_type = event_type
        self.extra_data = extra_data or {}
        self.start = 0.0

    def __enter__(self) -> profile:
        self.start = time.time()
        return self

    def __exit__(self, *exc: Any) -> None:
        worker = global_state.worker
        if worker is None or not hasattr(worker, "record_profile"):
            return
        worker.record_profile(self.event_type, self.start, time.time(), self.extra_data)
