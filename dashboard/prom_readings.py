"""The dashboard's state read as the plain figures ``/metrics`` exports, whichever names it
exports them under (Ember's own, ``prom_ember``; Ray's, ``prom_ray``): live nodes, the GCS's
per-node resources and demands summed over the cluster, placement groups by state, processes
summed per component, and the bound on label values.

Nothing here walks the task table: a scrape with a million tasks kept costs what one with ten
does (the table keeps its counts by name and state as events arrive).
"""

from __future__ import annotations

import os
import re
from collections import Counter as Tally
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily

MAX_LABEL_VALUES = int(os.environ.get("EMBER_METRICS_MAX_LABEL_VALUES", "200"))
OTHER = "other"
PG_STATES = ("PENDING", "CREATED", "REMOVED")
# A placement group's own resources (``CPU_group_<i>_<pg id>``, ``bundle_group_<pg id>``...):
# names without end as groups come and go, and the node's CPU already counts what they hold.
_BUNDLE_RESOURCE = re.compile(r".+_group_(\d+_)?[0-9a-f]{16,}")


def node_resources(row: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """A GCS node row's (total, available) resources, placement groups' own left out."""
    total = {
        str(k): float(v)
        for k, v in (row.get("resources_total") or {}).items()
        if not _BUNDLE_RESOURCE.fullmatch(str(k))
    }
    available = row.get("resources_available") or {}
    return total, {k: float(available.get(k, 0.0)) for k in total}


def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def capped(tally: Tally) -> Tally:
    """At most MAX_LABEL_VALUES keys: the largest stay, the rest add up under 'other'."""
    if len(tally) <= MAX_LABEL_VALUES:
        return tally
    out: Tally = Tally()
    for i, (key, n) in enumerate(tally.most_common()):
        if i < MAX_LABEL_VALUES - 1:
            out[key] += n
        else:
            out[_other(key)] += n
    return out


def _other(key: Any) -> Any:
    # (name, state) keeps its state; a plain key becomes "other".
    return (OTHER, *key[1:]) if isinstance(key, tuple) else OTHER


def live_nodes(st: Any, node_id: str | None = None) -> list[tuple[str, Any]]:
    """(node id, the dashboard's node) of the live nodes, or of the one asked for."""
    return [
        (nid, n)
        for nid, n in st.nodes.items()
        if n.state == "ALIVE" and (node_id is None or nid == node_id)
    ]


def node_ip(node: Any) -> str:
    return str(node.info.get("node_ip") or "")


def gcs_nodes(st: Any) -> dict[str, dict[str, Any]]:
    """The GCS's rows of its live nodes by node id: resources and pending demands are kept
    per node there (each raylet's heartbeat), not for the cluster."""
    return {
        str(n.get("node_id")): n
        for n in (st.cluster or {}).get("nodes") or ()
        if n.get("state") == "ALIVE"
    }


def cluster_resources(st: Any) -> tuple[dict[str, float], dict[str, float]]:
    """(total, available) per resource, summed over the live nodes."""
    total: dict[str, float] = {}
    available: dict[str, float] = {}
    for row in gcs_nodes(st).values():
        node_total, node_available = node_resources(row)
        for k, v in node_total.items():
            total[k] = total.get(k, 0.0) + v
            available[k] = available.get(k, 0.0) + node_available[k]
    return total, available


@dataclass(slots=True)
class Demand:
    shape: dict[str, float]
    count: int
    infeasible: bool


def pending_demands(st: Any) -> list[Demand]:
    """What waits for resources: the raylets' queued leases (tasks and actors' workers) by
    shape, and the actors the GCS parked because no node had room for them. A shape is
    infeasible when no live node has that much in total (as ``ember status`` decides it: a
    raylet's own flag judges its node alone)."""
    nodes = gcs_nodes(st)
    totals = [n.get("resources_total") or {} for n in nodes.values()]

    def demand(shape: dict[str, Any], count: int) -> Demand:
        shape = {str(k): float(v) for k, v in shape.items() if v}
        fits = any(all(t.get(k, 0.0) >= v for k, v in shape.items()) for t in totals)
        return Demand(shape, count, not fits)

    out = [
        demand(d.get("shape") or {}, int(d.get("count") or 1))
        for n in nodes.values()
        for d in n.get("pending_demands") or ()
    ]
    for a in (st.cluster or {}).get("pending_actors") or ():
        out.append(demand(a.get("resources") or {}, 1))
    return out


def shape_key(shape: dict[str, float]) -> str:
    return ",".join(f"{k}:{v:g}" for k, v in sorted(shape.items())) or "{}"


def placement_groups(st: Any) -> Tally:
    """Placement groups by state; every state is present (zero when none is in it)."""
    out: Tally = Tally(dict.fromkeys(PG_STATES, 0))
    for pg in (st.cluster or {}).get("placement_groups") or ():
        out[str(pg.get("state") or "")] += 1
    return out


@dataclass(slots=True)
class ComponentUse:
    cpu_percent: float = 0.0
    rss_bytes: float = 0.0
    uss_bytes: float = 0.0
    processes: int = 0


def components(st: Any, node_id: str) -> dict[str, ComponentUse]:
    """A node's Ember processes summed per component (worker, driver, raylet, gcs_server,
    agent, dashboard): the label set stays bounded however many workers come and go."""
    sums: dict[str, ComponentUse] = {}
    for w in (st.workers.get(node_id) or {}).values():
        comp = str(w.get("kind") or w.get("component") or "worker")
        use = sums.setdefault(comp, ComponentUse())
        use.cpu_percent += float(w.get("cpu_percent") or 0)
        use.rss_bytes += float(w.get("rss_bytes") or 0)
        use.uss_bytes += float(w.get("uss_bytes") or 0)
        use.processes += 1
    return dict(sorted(sums.items()))


def root_disk(sample: dict[str, Any]) -> tuple[float, float] | None:
    """(total, used) bytes of the disk mounted at ``/``, else of the first one listed."""
    disks = sample.get("disks") or ()
    disk = next((d for d in disks if d.get("mount") == "/"), disks[0] if disks else None)
    if disk is None:
        return None
    return float(disk.get("total_bytes") or 0), float(disk.get("used_bytes") or 0)
