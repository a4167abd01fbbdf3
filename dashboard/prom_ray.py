"""The Ray-compatible metric set (``/metrics?compat=ray``): what Ember knows, under the names
and labels Ray's own exporters use, so the Grafana dashboards Ray users already have (Ray's
default panels: ``ray_tasks``, ``ray_actors``, ``ray_resources``, ``ray_node_*``,
``ray_component_*``, ``ray_cluster_*_nodes``, ``autoscaler_*``) plot an Ember cluster.

Every series carries ``SessionName`` (the session directory's name, as in Ray), which Ray's
panels filter on; application metrics are ``ray_<name>``, with it too. Node series carry Ray's node labels (``ip``, ``IsHeadNode``,
``RayNodeType``) and ``NodeId``, which keeps two nodes on one machine apart. Where Ember knows
less than Ray, the nearest truth is exported and said here:

- ``ray_tasks``: ``IsRetry`` is "1" only for Ember's RETRYING tasks (a failed attempt waiting
  to run again), which show as ``PENDING_ARGS_AVAIL``; the kept tasks' counts, as in Ray. A
  running task reads ``RUNNING`` (its worker reports it), so Ray's "Running Tasks by Name"
  panel shows it.
- ``ray_actors``: ``Source="gcs"`` has the GCS's states; ``Source="executor"`` has each live
  actor as ``ALIVE`` (Ember does not track whether an actor is running a method).
- ``ray_component_mem_shared_bytes`` is RSS - USS (pages shared with other processes), so
  Ray's "memory by component" (RSS - shared) plots the USS.
- ``ray_cluster_pending_nodes`` and ``autoscaler_pending_nodes`` are 0 and
  ``autoscaler_pending_resources`` is what waits for resources (tasks and actors) when no
  autoscaler runs; while one runs, the ``autoscaler_*`` families are its status record's
  figures (``dashboard/autoscaler/prom.py``).

Ray's names break Prometheus's naming rules in places (``ray_node_cpu_count`` is a gauge),
so this set, unlike Ember's own, does not pass ``promtool check metrics``' lint.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator
from typing import Any

from ember.dashboard.prom_readings import (
    capped,
    cluster_resources,
    components,
    gauge,
    gcs_nodes,
    is_number,
    node_ip,
    node_resources,
    pending_demands,
    placement_groups,
    root_disk,
)
from prometheus_client.core import GaugeMetricFamily, Metric

NODE_LABELS = ["ip", "IsHeadNode", "RayNodeType", "NodeId", "SessionName"]
MB = 1e6  # Ray's component memory is in megabytes of 10^6 bytes (its panels multiply by 1e6)
MIB = 2**20  # its GPU memory in MiB (its panels multiply by 1024 * 1024)
# Sample key -> Ray's family; each a gauge with NODE_LABELS.
_NODE_GAUGES = {
    "cpu_percent": ("ray_node_cpu_utilization", "Total CPU usage on a node (percent)"),
    "num_cpus": ("ray_node_cpu_count", "CPUs on a node"),
    "mem_used_bytes": ("ray_node_mem_used", "Memory usage on a node (bytes)"),
    "mem_available_bytes": ("ray_node_mem_available", "Memory available on a node (bytes)"),
    "mem_total_bytes": ("ray_node_mem_total", "Total memory on a node (bytes)"),
    "mem_shared_bytes": ("ray_node_mem_shared_bytes", "Shared memory on a node (bytes)"),
    "disk_read_bytes_per_s": ("ray_node_disk_io_read_speed", "Disk read speed (bytes/s)"),
    "disk_write_bytes_per_s": ("ray_node_disk_io_write_speed", "Disk write speed (bytes/s)"),
    "net_sent_bytes_per_s": ("ray_node_network_send_speed", "Network send speed (bytes/s)"),
    "net_recv_bytes_per_s": (
        "ray_node_network_receive_speed",
        "Network receive speed (bytes/s)",
    ),
    "net_sent_bytes": ("ray_node_network_sent", "Total network sent (bytes)"),
    "net_recv_bytes": ("ray_node_network_received", "Total network received (bytes)"),
}
# Ember's component names -> Ray's.
_COMPONENT = {"gcs_server": "gcs", "worker": "workers"}
_ACTOR_STATE = {"PENDING": "PENDING_CREATION"}

# Names (without ``ray_``) an application metric may not take in this set.
RESERVED = frozenset(
    {
        *(name.removeprefix("ray_") for name, _ in _NODE_GAUGES.values()),
        *(
            "node_disk_usage node_disk_free node_disk_utilization_percentage "
            "node_gpus_utilization node_gpus_available node_gram_used node_gram_available "
            "object_store_memory resources component_cpu_percentage component_rss_mb "
            "component_uss_mb component_mem_shared_bytes tasks actors placement_groups "
            "cluster_active_nodes cluster_failed_nodes cluster_pending_nodes"
        ).split(),
    }
)


def _node_values(nid: str, node: Any, session: str) -> list[str]:
    head = bool(node.info.get("is_head"))
    return [node_ip(node), "true" if head else "false", "head" if head else "worker", nid, session]


def node_metrics(st: Any, nodes: list[tuple[str, Any]], session: str) -> Iterator[Metric]:
    """Ray's per-node families (the reporter agent's and the raylet's) for the live nodes."""
    families = {k: gauge(name, doc, NODE_LABELS) for k, (name, doc) in _NODE_GAUGES.items()}
    disk_used = gauge("ray_node_disk_usage", "Disk used on a node, at / (bytes)", NODE_LABELS)
    disk_free = gauge("ray_node_disk_free", "Disk free on a node, at / (bytes)", NODE_LABELS)
    disk_pct = gauge(
        "ray_node_disk_utilization_percentage", "Disk used on a node, at / (percent)", NODE_LABELS
    )
    gpu_labels = [*NODE_LABELS, "GpuIndex", "GpuDeviceName"]
    gpu_util = gauge("ray_node_gpus_utilization", "GPU usage (percent)", gpu_labels)
    gpu_avail = gauge("ray_node_gpus_available", "GPUs on a node (1 per GPU)", gpu_labels)
    gram_used = gauge("ray_node_gram_used", "GPU memory used (MiB)", gpu_labels)
    gram_avail = gauge("ray_node_gram_available", "GPU memory free (MiB)", gpu_labels)
    store = gauge(
        "ray_object_store_memory",
        "Object store memory in use (bytes), by location",
        [*NODE_LABELS, "Location"],
    )
    for nid, node in nodes:
        lv = _node_values(nid, node, session)
        m = node.metrics or {}
        for key, fam in families.items():
            if is_number(m.get(key)):
                fam.add_metric(lv, float(m[key]))
        disk = root_disk(m)
        if disk is not None:
            total, used = disk
            disk_used.add_metric(lv, used)
            disk_free.add_metric(lv, max(total - used, 0.0))
            disk_pct.add_metric(lv, 100.0 * used / total if total else 0.0)
        for gpu in m.get("gpus") or ():
            gl = [*lv, str(gpu.get("index")), str(gpu.get("name") or "")]
            gpu_avail.add_metric(gl, 1.0)
            if is_number(gpu.get("utilization_percent")):
                gpu_util.add_metric(gl, float(gpu["utilization_percent"]))
            if is_number(gpu.get("memory_used_bytes")):
                gram_used.add_metric(gl, gpu["memory_used_bytes"] / MIB)
                if is_number(gpu.get("memory_total_bytes")):
                    free = gpu["memory_total_bytes"] - gpu["memory_used_bytes"]
                    gram_avail.add_metric(gl, max(free, 0) / MIB)
        # Ember's store is shared memory (no fallback to disk mappings); spilled objects
        # are on disk, Ray's SPILLED location.
        if is_number(m.get("object_store_used_bytes")):
            store.add_metric([*lv, "MMAP_SHM"], float(m["object_store_used_bytes"]))
        if is_number(m.get("object_store_spilled_bytes")):
            store.add_metric([*lv, "SPILLED"], float(m["object_store_spilled_bytes"]))
    yield from families.values()
    yield from (disk_used, disk_free, disk_pct, gpu_util, gpu_avail, gram_used, gram_avail)
    yield store
    yield from _resources(st, nodes, session)
    yield from _components(st, nodes, session)


def _resources(st: Any, nodes: list[tuple[str, Any]], session: str) -> Iterator[Metric]:
    """``ray_resources``: each node's logical resources, USED and AVAILABLE (their sum is the
    node's total, which Ray's panels plot as MAX), from the GCS's view of the node."""
    fam = gauge(
        "ray_resources",
        "Logical resources of a node, by name and state (USED, AVAILABLE)",
        ["Name", "State", "NodeAddress", "NodeId", "SessionName"],
    )
    rows = gcs_nodes(st)
    for nid, node in nodes:
        row = rows.get(nid)
        if row is None:
            continue
        total, available = node_resources(row)
        base = [node_ip(node), nid, session]
        for name, value in sorted(total.items()):
            fam.add_metric([name, "USED", *base], max(value - available[name], 0.0))
            fam.add_metric([name, "AVAILABLE", *base], available[name])
    yield fam


def _components(st: Any, nodes: list[tuple[str, Any]], session: str) -> Iterator[Metric]:
    labels = ["Component", "ip", "NodeId", "SessionName"]
    cpu = gauge("ray_component_cpu_percentage", "CPU use of a component (percent)", labels)
    rss = gauge("ray_component_rss_mb", "RSS of a component (MB)", labels)
    uss = gauge("ray_component_uss_mb", "USS of a component (MB)", labels)
    shared = gauge(
        "ray_component_mem_shared_bytes", "Memory a component shares (RSS - USS, bytes)", labels
    )
    for nid, node in nodes:
        for comp, use in components(st, nid).items():
            lv = [_COMPONENT.get(comp, comp), node_ip(node), nid, session]
            cpu.add_metric(lv, use.cpu_percent)
            rss.add_metric(lv, use.rss_bytes / MB)
            uss.add_metric(lv, use.uss_bytes / MB)
            shared.add_metric(lv, max(use.rss_bytes - use.uss_bytes, 0.0))
    yield from (cpu, rss, uss, shared)


def cluster_metrics(st: Any, session: str) -> Iterator[Metric]:
    """Ray's cluster-wide families: tasks, actors, placement groups, nodes, the autoscaler's
    view of resources and demand."""
    tasks = gauge(
        "ray_tasks",
        "Tasks by state and function name",
        ["State", "Name", "IsRetry", "SessionName"],
    )
    tally: Tally = Tally()
    for (name, state), n in st.tasks.by_name_state.items():
        if n:
            retry = state == "RETRYING"
            tally[
                (name or "", "PENDING_ARGS_AVAIL" if retry else state, "1" if retry else "0")
            ] += n
    for (name, state, retry), n in sorted(capped(tally).items()):
        tasks.add_metric([state, name, retry, session], float(n))
    yield tasks

    actors = gauge(
        "ray_actors",
        "Actors by state and class",
        ["State", "Name", "Source", "NodeAddress", "SessionName"],
    )
    ips = {nid: node_ip(n) for nid, n in st.nodes.items()}
    tally = Tally()
    for row in list(st.actors.values()):
        cls = str(row.get("class_name") or "")
        state = str(row.get("state") or "")
        tally[(cls, _ACTOR_STATE.get(state, state), "gcs", "")] += 1
        if state == "ALIVE":
            # Ray's panels pick live actors by node (NodeAddress=~"$Instance", ".+" for All).
            ip = ips.get(str(row.get("node_id") or ""), "")
            tally[(cls, "ALIVE", "executor", ip)] += 1
    for (cls, state, source, ip), n in sorted(capped(tally).items()):
        actors.add_metric([state, cls, source, ip, session], float(n))
    yield actors

    pgs = gauge("ray_placement_groups", "Placement groups by state", ["State", "SessionName"])
    for state, n in sorted(placement_groups(st).items()):
        pgs.add_metric([state, session], float(n))
    yield pgs

    yield from _nodes(st, session)

    total, _ = cluster_resources(st)
    res = gauge(
        "autoscaler_cluster_resources", "Resources of the live nodes", ["resource", "SessionName"]
    )
    for name, value in sorted(total.items()):
        res.add_metric([name, session], value)
    yield res
    pending: dict[str, float] = {}
    for d in pending_demands(st):
        for name, value in d.shape.items():
            pending[name] = pending.get(name, 0.0) + value * d.count
    fam = gauge(
        "autoscaler_pending_resources",
        "Resources that tasks and actors wait for",
        ["resource", "SessionName"],
    )
    for name in sorted(set(pending) | set(total)):
        fam.add_metric([name, session], pending.get(name, 0.0))
    yield fam


def _nodes(st: Any, session: str) -> Iterator[GaugeMetricFamily]:
    by_type: dict[str, Tally] = {"head": Tally(), "worker": Tally()}
    for node in st.nodes.values():
        by_type["head" if node.info.get("is_head") else "worker"][node.state] += 1
    for prefix, type_label, failed in (
        ("ray_cluster", "node_type", "failed_nodes"),
        ("autoscaler", "NodeType", "recently_failed_nodes"),
    ):
        labels = [type_label, "SessionName"]
        active = gauge(f"{prefix}_active_nodes", "Live nodes by type", labels)
        dead = gauge(f"{prefix}_{failed}", "Dead nodes by type", labels)
        pending = gauge(f"{prefix}_pending_nodes", "Nodes being started (no autoscaler: 0)", labels)
        for node_type, states in by_type.items():
            active.add_metric([node_type, session], float(states.get("ALIVE", 0)))
            dead.add_metric([node_type, session], float(states.get("DEAD", 0)))
            pending.add_metric([node_type, session], 0.0)
        yield from (active, dead, pending)
