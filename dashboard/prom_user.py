"""Application metrics (``ember.util.metrics``) as Prometheus families: the agents ship each
process's snapshot in their sample (``user_metrics``); counters and histograms add up over
the cluster, a gauge keeps the newest value. The prefix is ``ember_``, or ``ray_`` in the
Ray-compatible set (what Ray names an application's metrics)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ember.dashboard.prom_readings import MAX_LABEL_VALUES
from ember.util.metrics import merge_snapshots
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)


def user_metrics(
    nodes: list[tuple[str, Any]],
    prefix: str,
    reserved: frozenset[str],
    extra: dict[str, str] | None = None,
) -> Iterator[Metric]:
    """``reserved``: names (without the prefix) of the set's own families, which an
    application metric may not take; such a metric is left out and named in the conflicts.
    ``extra``: labels every series gets (Ray's ``SessionName``), unless a metric has a tag of
    that name."""
    snapshots: list[dict[str, Any]] = []
    for _nid, node in nodes:
        if node.state == "ALIVE":
            snapshots.extend((node.metrics or {}).get("user_metrics") or ())
    merged = merge_snapshots(snapshots)
    for m in merged["metrics"].values():
        base = m["name"].removesuffix("_total") if m["type"] == "counter" else m["name"]
        if base in reserved:
            merged["conflicts"].append(m["name"])
            continue
        name = f"{prefix}{base}"
        added = {k: v for k, v in (extra or {}).items() if k not in m["tag_keys"]}
        keys = [*m["tag_keys"], *added]
        values = list(added.values())
        doc = m["description"] or f"application metric {m['name']}"
        if m["type"] == "counter":
            fam: Metric = CounterMetricFamily(name, doc, labels=keys)
            for key, s in m["series"].items():
                fam.add_metric([*key, *values], s["value"])
        elif m["type"] == "gauge":
            fam = GaugeMetricFamily(name, doc, labels=keys)
            for key, s in m["series"].items():
                fam.add_metric([*key, *values], s["value"])
        else:
            fam = HistogramMetricFamily(name, doc, labels=keys)
            bounds = [*(f"{b:g}" for b in m["boundaries"]), "+Inf"]
            for key, s in m["series"].items():
                running, buckets = 0, []
                for bound, n in zip(bounds, s["buckets"], strict=True):
                    running += n
                    buckets.append((bound, float(running)))
                fam.add_metric([*key, *values], buckets, s["sum"])
        yield fam
    dropped = GaugeMetricFamily(
        f"{prefix}user_metrics_dropped_series",
        "Application metric series dropped past the per-process bounds",
        labels=[],
    )
    dropped.add_metric([], float(merged["dropped_series"]))
    yield dropped
    conflicts = GaugeMetricFamily(
        f"{prefix}user_metrics_conflicts",
        "Application metrics left out: defined twice with different types, tags or buckets, "
        "or named like one of the exporter's own",
        labels=["name"],
    )
    for name in sorted(set(merged["conflicts"]))[:MAX_LABEL_VALUES]:
        conflicts.add_metric([name], 1.0)
    yield conflicts
