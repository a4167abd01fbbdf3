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
    "object_store_spilled_bytes",
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


# Application metric series kept as history (the newest first-seen ones past it are dropped).
MAX_USER_SERIES = 200


def user_series(snapshots: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{"name{tag=v}": {"name", "type", "tags", "value"}}`` from the processes' snapshots,
    merged as ``/metrics`` merges them; a histogram's value is its mean (sum / count)."""
    from ember.util.metrics import merge_snapshots

    out: dict[str, dict[str, Any]] = {}
    for m in merge_snapshots(snapshots)["metrics"].values():
        for key, s in m["series"].items():
            tags = dict(zip(m["tag_keys"], key, strict=True))
            if m["type"] == "histogram":
                count = sum(s.get("buckets") or ())
                value = s.get("sum", 0.0) / count if count else None
            else:
                value = s.get("value")
            label = ",".join(f"{k}={v}" for k, v in tags.items())
            out[f"{m['name']}{{{label}}}" if label else m["name"]] = {
                "name": m["name"],
                "type": m["type"],
                "tags": tags,
                "value": value,
            }
    return out


class UserMetricHistory:
    """The application metrics (``ember.util.metrics``) of the whole cluster over the last
    ``seconds``: one merged reading per period, for the Metrics page's charts."""

    def __init__(self, seconds: float, period: float) -> None:
        self.seconds = seconds
        self.period = period
        self.ring: deque[tuple[float, dict[str, float | None]]] = deque(
            maxlen=max(int(seconds / max(period, 0.1)) + 1, 2)
        )
        self.meta: dict[str, dict[str, Any]] = {}
        self.dropped_series = 0

    def due(self, t: float) -> bool:
        return not self.ring or t - self.ring[-1][0] >= self.period * 0.9

    def add(self, t: float, snapshots: list[dict[str, Any]]) -> None:
        values: dict[str, float | None] = {}
        for key, s in user_series(snapshots).items():
            if key not in self.meta:
                if len(self.meta) >= MAX_USER_SERIES:
                    self.dropped_series += 1
                    continue
                self.meta[key] = {k: s[k] for k in ("name", "type", "tags")}
            values[key] = s["value"]
        self.ring.append((t, values))
        while self.ring and self.ring[0][0] < t - self.seconds:
            self.ring.popleft()

    def query(self, since: float | None = None) -> dict[str, Any]:
        rows = [(t, v) for t, v in self.ring if since is None or t >= since]
        seen = {k for _, v in rows for k in v}
        return {
            "times": [t for t, _ in rows],
            "series": [
                {"key": k, **self.meta[k], "values": [v.get(k) for _, v in rows]}
                for k in sorted(seen)
            ],
            "dropped_series": self.dropped_series,
        }
