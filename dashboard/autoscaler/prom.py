"""The autoscaler's figures as metric families, from its newest status record, while it runs
(the record is fresh), in the two name sets ``/metrics`` serves:

- ``?compat=ray``: Ray's ``autoscaler_*`` families (names, types and labels of Ray's
  ``autoscaler/_private/prom_metrics.py``: ``NodeType``, ``SessionName``), so Ray's
  "Autoscaler" Grafana panels plot an Ember cluster; they replace ``prom_ray``'s stand-ins
  of the same names, which without an autoscaler come from the node table.
- plain ``/metrics``: the same figures as ``ember_autoscaler_*`` with snake_case labels
  (``node_type``), since Ray's camelCase labels fail ``promtool check metrics``, which
  Ember's own set passes.

What Ember's record does not have is left out rather than made up: the update and launch
time histograms, and the updater's counters (Ember runs no per-node updater threads).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator
from typing import Any

from ember.dashboard.autoscaler import record as rec_mod
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

# The families (Ray's names) that replace prom_ray's stand-ins while an autoscaler runs.
FAMILIES = frozenset(
    {
        "autoscaler_active_nodes",
        "autoscaler_pending_nodes",
        "autoscaler_recently_failed_nodes",
        "autoscaler_cluster_resources",
        "autoscaler_pending_resources",
    }
)
# Ember's names of them, without the ``ember_`` prefix (application metrics may not take them).
EMBER_FAMILIES = frozenset(
    {
        "autoscaler_active_nodes",
        "autoscaler_pending_nodes",
        "autoscaler_recently_failed_nodes",
        "autoscaler_running_workers",
        "autoscaler_started_nodes",
        "autoscaler_stopped_nodes",
        "autoscaler_failed_create_nodes",
        "autoscaler_cluster_resources",
        "autoscaler_pending_resources",
    }
)


def fresh_record(st: Any) -> dict[str, Any] | None:
    """The autoscaler's record when one runs now, else None."""
    rec = st.autoscaler.record
    return rec if rec_mod.is_fresh(rec, st.clock()) else None


def metrics(rec: dict[str, Any], session: str | None) -> Iterator[Metric]:
    """Every family, from one record: Ray's names and labels with ``session`` (its
    ``SessionName``), or Ember's (``ember_autoscaler_*``, ``node_type``) when None."""
    ray = session is not None
    prefix = "" if ray else "ember_"
    common = ["SessionName"] if ray else []
    extra = [session] if ray else []
    by_type = ["NodeType" if ray else "node_type", *common]

    def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        return GaugeMetricFamily(prefix + name, doc, labels=labels)

    active = gauge("autoscaler_active_nodes", "Number of nodes in the cluster.", by_type)
    pending = gauge("autoscaler_pending_nodes", "Number of nodes pending to be started.", by_type)
    failed = gauge(
        "autoscaler_recently_failed_nodes",
        "The number of recently failed nodes (launch failures of the last 10 minutes).",
        by_type,
    )
    failed_by_type = Tally(
        i.get("node_type") for i in rec.get("instances") or [] if i.get("state") == "failed"
    )
    workers = 0
    head = rec_mod.head_type(rec)
    for t in rec_mod.node_types(rec):
        active.add_metric([t["name"], *extra], float(t["current"]))
        pending.add_metric([t["name"], *extra], float(t["pending"]))
        failed.add_metric([t["name"], *extra], float(failed_by_type.get(t["name"], 0)))
        if t["name"] != head:
            workers += t["current"]
    yield from (active, pending, failed)

    running = gauge("autoscaler_running_workers", "Number of worker nodes running.", common)
    running.add_metric(extra, float(workers))
    yield running

    counters = rec.get("counters") or {}
    for name, key, doc in (
        ("autoscaler_started_nodes", "started", "Number of nodes started."),
        ("autoscaler_stopped_nodes", "stopped", "Number of nodes stopped."),
        (
            "autoscaler_failed_create_nodes",
            "failed_create",
            "Number of nodes that failed to be created (the node provider's create_node failed).",
        ),
    ):
        fam = CounterMetricFamily(prefix + name, doc, labels=common)
        fam.add_metric(extra, float(counters.get(key) or 0))
        yield fam

    per_resource = ["resource", *common]
    total = gauge(
        "autoscaler_cluster_resources", "Total logical resources in the cluster.", per_resource
    )
    usage = rec.get("usage") or {}
    for name, pair in sorted(usage.items()):
        if isinstance(pair, list | tuple) and len(pair) == 2:
            total.add_metric([name, *extra], float(pair[1]))
    yield total
    launching = rec_mod.pending_resources(rec)
    pend = gauge(
        "autoscaler_pending_resources",
        "Pending logical resources in the cluster (of the nodes being launched).",
        per_resource,
    )
    for name in sorted(set(launching) | set(usage)):
        pend.add_metric([name, *extra], launching.get(name, 0.0))
    yield pend
