"""Metric history in memory: the last ``seconds`` of samples per series, so the
charts need no Prometheus (Ray #30660). One ring per node plus one for the cluster."""

from __future__ import annotations

from collections import deque
from typing import Any

# The node metrics kept as history (flat names; the full sample stays in the node's latest).
SERIES = (
    "cpu_percent",
    "mem_used_bytes",
    "mem_total_bytes",
    "disk_read_bytes_per_s",
    "disk_write_bytes_per_s",
    "net_sent_bytes_per_s",
    "net_recv_bytes_per_s",
    "object_store_used_bytes",
    "object_store_capacity_bytes",
    "num_workers",
)


class History:
    """``{key: deque[(time, {series: value})]}`` bounded by ``seconds / period`` samples."""

    def __init__(self, seconds: float, period: float) -> None:
        self.seconds = seconds
        self.maxlen = max(int(seconds / max(period, 0.1)) + 1, 2)
        self.rings: dict[str, deque] = {}

    def add(self, key: str, t: float, sample: dict[str, Any]) -> None:
        ring = self.rings.get(key)
        if ring is None:
            ring = self.rings[key] = deque(maxlen=self.maxlen)
        ring.append((t, {k: sample[k] for k in SERIES if k in sample}))
        while ring and ring[0][0] < t - self.seconds:
            ring.popleft()

    def forget(self, key: str) -> None:
        self.rings.pop(key, None)

    def query(self, key: str, since: float | None = None) -> list[dict[str, Any]]:
        ring = self.rings.get(key, ())
        return [{"time": t, **values} for t, values in ring if since is None or t >= since]
