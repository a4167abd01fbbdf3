"""Ember's own metric families (``ember_*``), built from the dashboard's state at each scrape.

Names carry their unit (``_bytes``, ``_seconds``, ``_percent``) and counters end in
``_total``, as ``promtool check metrics`` wants. Labels are bounded: node id and ip,
component, state, function or class name, mount, resource shape; function, class and shape
values are capped per metric (``MAX_LABEL_VALUES``) and the rest summed under ``"other"``.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterator
from typing import Any

import psutil
from ember.dashboard.autoscaler import prom as autoscaler_prom
from ember.dashboard.prom_readings import (
    MAX_LABEL_VALUES,
    capped,
    cluster_resources,
    components,
    is_number,
    node_ip,
    pending_demands,
    placement_groups,
    shape_key,
)
from ember.dashboard.prom_readings import gauge as _gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

_SELF = psutil.Process()
_SELF.cpu_percent()  # primes the interval: the next call measures since this one

NODE_LABELS = ["node_id", "ip"]
# Sample key -> (family name without the prefix, help). All gauges, one series per node.
_NODE_GAUGES = {
    "cpu_percent": ("node_cpu_percent", "CPU use of the node, 0-100 (all cores)"),
    "num_cpus": ("node_cpus", "Logical CPUs of the node's machine"),
    "mem_total_bytes": ("node_memory_total_bytes", "Physical memory"),
    "mem_used_bytes": ("node_memory_used_bytes", "Memory in use (total - available)"),
    "mem_available_bytes": ("node_memory_available_bytes", "Memory available"),
    "mem_shared_bytes": ("node_memory_shared_bytes", "Shared memory (tmpfs, /dev/shm)"),
    "disk_read_bytes_per_s": ("node_disk_read_bytes_per_second", "Disk read rate"),
    "disk_write_bytes_per_s": ("node_disk_write_bytes_per_second", "Disk write rate"),
    "net_sent_bytes_per_s": ("node_network_sent_bytes_per_second", "Network send rate"),
    "net_recv_bytes_per_s": ("node_network_received_bytes_per_second", "Receive rate"),
    "uptime_s": ("node_uptime_seconds", "Seconds since the node booted"),
    "object_store_used_bytes": ("object_store_used_bytes", "Shared-memory store in use"),
    "object_store_capacity_bytes": ("object_store_capacity_bytes", "Store capacity"),
    "object_store_objects": ("object_store_objects", "Objects in the store"),
    "object_store_spilled_bytes": ("object_store_spilled_bytes", "Bytes of objects on disk"),
    "object_store_spilled_objects": ("object_store_spilled_objects", "Objects on disk"),
}
# Sample key -> (counter family name without the prefix or ``_total``, help).
_NODE_COUNTERS = {
    "object_store_spilled_bytes_total": (
        "object_store_bytes_spilled",
        "Bytes written to disk by spilling since the node started",
    ),
    "object_store_restored_bytes_total": (
        "object_store_bytes_restored",
        "Bytes read back from disk since the node started",
    ),
}

# Ember's cluster-wide families (without the prefix). An application metric may not take
# these names, nor those of the families a scrape of its node makes (the collector adds them):
# the two scopes are scraped apart, so a node's scrape would not see the clash.
CLUSTER_FAMILIES = frozenset(
    {
        "tasks",
        "tasks_finished",
        "tasks_failed",
        "actors",
        "placement_groups",
        "pending_demands",
        "cluster_resources",
        "cluster_resources_available",
        "nodes",
        "dashboard_cpu_percent",
        "dashboard_resident_memory_bytes",
        "dashboard_tasks_tracked",
        "dashboard_dropped",
        "dashboard_task_events_ingested",
        "jobs",
        *autoscaler_prom.EMBER_FAMILIES,
    }
)


def _g(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return _gauge(f"ember_{name}", doc, labels)


def _c(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(f"ember_{name}", doc, labels=labels)


def node_metrics(nodes: list[tuple[str, Any]]) -> Iterator[Metric]:
    """The machines' figures from each agent's sample (every node the state knows, so a
    dead one reads ``node_up 0``)."""
    labels = NODE_LABELS
    families = {key: _g(name, doc, labels) for key, (name, doc) in _NODE_GAUGES.items()}
    core = _g("node_cpu_core_percent", "CPU use per core, 0-100", [*labels, "core"])
    load = _g("node_load_average", "Load average", [*labels, "period"])
    disk_total = _g("node_disk_total_bytes", "Size of a mounted disk", [*labels, "mount"])
    disk_used = _g("node_disk_used_bytes", "Used space of a mounted disk", [*labels, "mount"])
    up = _g("node_up", "1 while the node is alive", labels)
    age = _g("node_metrics_age_seconds", "Seconds since the node's agent last reported", labels)
    gpu_util = _g("node_gpu_utilization_percent", "GPU utilisation", [*labels, "gpu"])
    gpu_mem = _g("node_gpu_memory_used_bytes", "GPU memory in use", [*labels, "gpu"])
    # Counters since the machine booted (or the node started); rate() over the network ones
    # is what the gauges above estimate.
    net_totals = {
        "net_sent_bytes": _c(
            "node_network_sent_bytes", "Bytes sent by the node since boot", labels
        ),
        "net_recv_bytes": _c(
            "node_network_received_bytes", "Bytes received by the node since boot", labels
        ),
        **{key: _c(name, doc, labels) for key, (name, doc) in _NODE_COUNTERS.items()},
    }
    now = time.time()
    for nid, node in nodes:
        lv = [nid, node_ip(node)]
        up.add_metric(lv, 1.0 if node.state == "ALIVE" else 0.0)
        age.add_metric(lv, max(now - node.last_seen, 0.0))
        m = node.metrics or {}
        if node.state != "ALIVE":
            continue  # a dead node's last sample would read as current
        for key, fam in families.items():
            if is_number(m.get(key)):
                fam.add_metric(lv, float(m[key]))
        for key, counter in net_totals.items():
            if is_number(m.get(key)):
                counter.add_metric(lv, float(m[key]))
        for i, pct in enumerate(m.get("cpu_per_core") or ()):
            core.add_metric([*lv, str(i)], float(pct))
        for period, value in zip(("1m", "5m", "15m"), m.get("load_avg") or (), strict=False):
            load.add_metric([*lv, period], float(value))
        for d in m.get("disks") or ():
            disk_total.add_metric([*lv, str(d.get("mount"))], float(d.get("total_bytes") or 0))
            disk_used.add_metric([*lv, str(d.get("mount"))], float(d.get("used_bytes") or 0))
        for gpu in m.get("gpus") or ():
            gl = [*lv, str(gpu.get("index"))]
            if gpu.get("utilization_percent") is not None:
                gpu_util.add_metric(gl, float(gpu["utilization_percent"]))
            if gpu.get("memory_used_bytes") is not None:
                gpu_mem.add_metric(gl, float(gpu["memory_used_bytes"]))
    yield up
    yield age
    yield from families.values()
    yield from (core, load, disk_total, disk_used, gpu_util, gpu_mem)
    yield from net_totals.values()


def agent_metrics(nodes: list[tuple[str, Any]]) -> Iterator[Metric]:
    """Each live node's agent: what it costs and what it holds. Its process's CPU and memory
    only for an agent in a process of its own; the head's runs in the dashboard's process,
    whose figures (``ember_dashboard_*``) include it, and its sampling CPU time is its share."""
    labels = NODE_LABELS
    info = _g(
        "agent_info",
        "1 per live node's agent; process: 'own' or 'dashboard' (the head's, in the "
        "dashboard's process)",
        [*labels, "process"],
    )
    cpu = _g("agent_cpu_percent", "CPU use of an agent in its own process (a core = 100)", labels)
    rss = _g("agent_resident_memory_bytes", "Resident memory of an agent's own process", labels)
    sample_cpu = _c(
        "agent_sample_cpu_seconds", "CPU time the agent spent measuring its node", labels
    )
    sample_s = _g("agent_sample_duration_seconds", "Wall time of the agent's last sample", labels)
    buffered = _g("agent_task_events_buffered", "Task events the agent holds, not yet sent", labels)
    dropped = _c(
        "agent_task_events_dropped",
        "Task events the agent dropped: its buffer was full while the dashboard was away",
        labels,
    )
    for nid, node in nodes:
        agent = (node.metrics or {}).get("agent")
        if node.state != "ALIVE" or not agent:
            continue
        lv = [nid, node_ip(node)]
        info.add_metric([*lv, "dashboard" if agent.get("in_dashboard") else "own"], 1.0)
        for fam, key in (
            (cpu, "cpu_percent"),
            (rss, "rss_bytes"),
            (sample_cpu, "sample_cpu_seconds"),
            (sample_s, "sample_seconds"),
            (buffered, "task_events_buffered"),
            (dropped, "task_events_dropped"),
        ):
            if is_number(agent.get(key)):
                fam.add_metric(lv, float(agent[key]))
    yield from (info, cpu, rss, sample_cpu, sample_s, buffered, dropped)


def component_metrics(st: Any, nodes: list[tuple[str, Any]]) -> Iterator[Metric]:
    """Per node and component, summed over its processes."""
    labels = [*NODE_LABELS, "component"]
    cpu = _g("component_cpu_percent", "CPU use of a component's processes (a core = 100)", labels)
    rss = _g("component_resident_memory_bytes", "Resident memory of a component", labels)
    uss = _g("component_unique_memory_bytes", "Unique (USS) memory of a component", labels)
    count = _g("component_processes", "Processes of a component", labels)
    for nid, node in nodes:
        if node.state != "ALIVE":
            continue
        for comp, use in components(st, nid).items():
            lv = [nid, node_ip(node), comp]
            cpu.add_metric(lv, use.cpu_percent)
            rss.add_metric(lv, use.rss_bytes)
            uss.add_metric(lv, use.uss_bytes)
            count.add_metric(lv, float(use.processes))
    yield from (cpu, rss, uss, count)


def cluster_metrics(st: Any) -> Iterator[Metric]:
    tasks = _g(
        "tasks", "Task attempts the dashboard keeps, by state and function", ["state", "name"]
    )
    by_name_state: Tally = Tally()
    for (name, state), n in st.tasks.by_name_state.items():
        if n:
            by_name_state[(name or "", state)] += n
    for (name, state), n in sorted(capped(by_name_state).items()):
        tasks.add_metric([state, name], float(n))
    yield tasks
    # Counters: the kept tasks' FINISHED count falls as old tasks leave the table, so rate()
    # over it would lie; these count every move into the state.
    ended = st.tasks.ended
    for state, name in (("FINISHED", "tasks_finished"), ("FAILED", "tasks_failed")):
        # Per attempt: a task retried once and then done is one FAILED and one FINISHED.
        counter = _c(name, f"Task attempts that reached {state}, since the dashboard started", [])
        counter.add_metric([], float(ended.get(state, 0)))
        yield counter

    actors = _g("actors", "Actors by state and class", ["state", "class_name"])
    tally: Tally = Tally()
    for row in list(st.actors.values()):
        tally[(str(row.get("class_name") or ""), str(row.get("state") or ""))] += 1
    for (cls, state), n in sorted(capped(tally).items()):
        actors.add_metric([state, cls], float(n))
    yield actors

    pgs = _g("placement_groups", "Placement groups by state", ["state"])
    for state, n in sorted(placement_groups(st).items()):
        pgs.add_metric([state], float(n))
    yield pgs

    pending = _g(
        "pending_demands",
        "Resource shapes waiting for a node (tasks and actors), by shape",
        ["shape", "infeasible"],
    )
    shapes: Tally = Tally()
    for d in pending_demands(st):
        shapes[(shape_key(d.shape), "true" if d.infeasible else "false")] += d.count
    for (key, infeasible), n in sorted(capped(shapes).items()):
        pending.add_metric([key, infeasible], float(n))
    yield pending

    resources_total = _g("cluster_resources", "Resources of live nodes", ["resource"])
    resources_avail = _g("cluster_resources_available", "Resources free now", ["resource"])
    total, available = cluster_resources(st)
    for name, value in sorted(total.items())[:MAX_LABEL_VALUES]:
        resources_total.add_metric([name], value)
        resources_avail.add_metric([name], available.get(name, 0.0))
    yield resources_total
    yield resources_avail

    nodes = _g("nodes", "Nodes by state", ["state"])
    node_states = Tally(n.state for n in st.nodes.values())
    for state in ("ALIVE", "DEAD"):
        nodes.add_metric([state], float(node_states.get(state, 0)))
    yield nodes


def dashboard_metrics(st: Any) -> Iterator[Metric]:
    with _SELF.oneshot():
        cpu = _SELF.cpu_percent()
        rss = _SELF.memory_info().rss
    g = _g("dashboard_cpu_percent", "CPU use of the dashboard server (a core = 100)", [])
    g.add_metric([], cpu)
    yield g
    g = _g("dashboard_resident_memory_bytes", "Resident memory of the dashboard server", [])
    g.add_metric([], float(rss))
    yield g
    g = _g("dashboard_tasks_tracked", "Task records held in the dashboard's memory", [])
    g.add_metric([], float(len(st.tasks)))
    yield g
    dropped = _c("dashboard_dropped", "Entries dropped past the dashboard's caps", ["what"])
    for what, n in sorted(st.dropped.items()):
        dropped.add_metric([what], float(n))
    yield dropped
    ingested = _c("dashboard_task_events_ingested", "Task events received from the agents", [])
    ingested.add_metric([], float(st.ingested.get("task_events", 0)))
    yield ingested


def job_metrics(jobs: Any) -> Iterator[Metric]:
    """Submitted jobs (the Jobs API's) by state, every state present (0 when none)."""
    from ember.dashboard.job_records import STATES

    fam = _g("jobs", "Jobs submitted through the Jobs API, by state", ["state"])
    counts = jobs.counts() if jobs is not None else {}
    for state in STATES:
        fam.add_metric([state], float(counts.get(state, 0)))
    yield fam
