"""``/metrics``: the cluster's metrics in the Prometheus text format, and the
file service-discovery list of the nodes' metrics endpoints.

Everything is read at scrape time from the dashboard's state (what the agents streamed), by
one custom collector: nothing is kept twice. Names start with ``ember_`` and carry their unit
(``_bytes``, ``_seconds``, ``_percent``, ``_total`` on counters). Labels are bounded: node id
and ip, component, state, function or class name, mount, resource shape; function, class and
shape values are capped per metric (``MAX_LABEL_VALUES``) and the rest are summed under
``"other"``, so a program with a million distinct lambdas cannot blow up Prometheus.

``/metrics?node_id=ID`` (or a unique prefix of it) serves one node's series;
``/metrics?scope=cluster`` the cluster-wide ones (tasks, actors, demands, the dashboard's own
cost). The service-discovery file lists one
target per node with that parameter, so Prometheus labels each node's series by target while
a plain ``/metrics`` scrape still gets everything.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter as Tally
from collections.abc import Iterator
from typing import Annotated, Any

import psutil
from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.routes.nodes import resolve_node
from ember.util.metrics import merge_snapshots
from fastapi import APIRouter, Depends, Query, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

MAX_LABEL_VALUES = int(os.environ.get("EMBER_METRICS_MAX_LABEL_VALUES", "200"))
SD_FILE = "prom_metrics_service_discovery.json"
# The classic text format: every Prometheus (Debian's 2.42 too) parses it; our names and
# labels are plain ASCII, so the newer 1.0.0 format would add nothing.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OTHER = "other"

router = APIRouter(tags=["metrics"])
_SELF = psutil.Process()
_SELF.cpu_percent()  # primes the interval: the next call measures since this one


def _g(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"ember_{name}", doc, labels=labels)


def _capped(tally: Tally) -> Tally:
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
    return (OTHER, key[1]) if isinstance(key, tuple) else OTHER


class EmberCollector:
    """Yields every metric family from a ``DashboardState`` at each scrape."""

    def __init__(self, ctx: DashboardContext, node_id: str | None, cluster: bool) -> None:
        self.ctx = ctx
        self.node_id = node_id
        self.cluster = cluster

    def collect(self) -> Iterator[Metric]:
        st = self.ctx.state
        nodes = [
            (nid, n) for nid, n in st.nodes.items() if self.node_id is None or nid == self.node_id
        ]
        if self.node_id is not None or not self.cluster:
            yield from _node_metrics(nodes)
            yield from _component_metrics(st, nodes)
            yield from _user_metrics(nodes)
        if self.node_id is None:
            yield from _cluster_metrics(st)
            yield from _dashboard_metrics(st)


def _node_metrics(nodes: list[tuple[str, Any]]) -> Iterator[Metric]:
    labels = ["node_id", "ip"]
    simple = {
        "cpu_percent": ("node_cpu_percent", "CPU use of the node, 0-100 (all cores)"),
        "num_cpus": ("node_cpu_count", "Logical CPUs of the node"),
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
    }
    families = {key: _g(name, doc, labels) for key, (name, doc) in simple.items()}
    core = _g("node_cpu_core_percent", "CPU use per core, 0-100", [*labels, "core"])
    load = _g("node_load_average", "Load average", [*labels, "period"])
    disk_total = _g("node_disk_total_bytes", "Size of a mounted disk", [*labels, "mount"])
    disk_used = _g("node_disk_used_bytes", "Used space of a mounted disk", [*labels, "mount"])
    up = _g("node_up", "1 while the node is alive", labels)
    age = _g("node_metrics_age_seconds", "Seconds since the node's agent last reported", labels)
    gpu_util = _g("node_gpu_utilization_percent", "GPU utilisation", [*labels, "gpu"])
    gpu_mem = _g("node_gpu_memory_used_bytes", "GPU memory in use", [*labels, "gpu"])
    # Agents that run as processes of their own; the head's runs in the dashboard's process
    # and is counted in the dashboard's figures below.
    agent_cpu = _g(
        "agent_cpu_percent", "CPU use of the node's agent process (one core = 100)", labels
    )
    agent_rss = _g(
        "agent_resident_memory_bytes", "Resident memory of the node's agent process", labels
    )
    # Counters since the machine booted; rate() over them is what the gauges above estimate.
    net_totals = {
        "net_sent_bytes": CounterMetricFamily(
            "ember_node_network_sent_bytes", "Bytes sent by the node since boot", labels=labels
        ),
        "net_recv_bytes": CounterMetricFamily(
            "ember_node_network_received_bytes",
            "Bytes received by the node since boot",
            labels=labels,
        ),
    }
    now = time.time()
    for nid, node in nodes:
        lv = [nid, str(node.info.get("node_ip") or "")]
        up.add_metric(lv, 1.0 if node.state == "ALIVE" else 0.0)
        age.add_metric(lv, max(now - node.last_seen, 0.0))
        m = node.metrics or {}
        if node.state != "ALIVE":
            continue  # a dead node's last sample would read as current
        for key, fam in families.items():
            value = m.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                fam.add_metric(lv, float(value))
        for key, fam in net_totals.items():
            if isinstance(m.get(key), int):
                fam.add_metric(lv, float(m[key]))
        for i, pct in enumerate(m.get("cpu_per_core") or ()):
            core.add_metric([*lv, str(i)], float(pct))
        for period, value in zip(("1m", "5m", "15m"), m.get("load_avg") or (), strict=False):
            load.add_metric([*lv, period], float(value))
        for d in m.get("disks") or ():
            disk_total.add_metric([*lv, str(d.get("mount"))], float(d.get("total_bytes") or 0))
            disk_used.add_metric([*lv, str(d.get("mount"))], float(d.get("used_bytes") or 0))
        for g in m.get("gpus") or ():
            gl = [*lv, str(g.get("index"))]
            if g.get("utilization_percent") is not None:
                gpu_util.add_metric(gl, float(g["utilization_percent"]))
            if g.get("memory_used_bytes") is not None:
                gpu_mem.add_metric(gl, float(g["memory_used_bytes"]))
        agent = m.get("agent") or {}
        if agent.get("cpu_percent") is not None:
            agent_cpu.add_metric(lv, float(agent["cpu_percent"]))
        if agent.get("rss_bytes") is not None:
            agent_rss.add_metric(lv, float(agent["rss_bytes"]))
    yield up
    yield age
    yield from families.values()
    yield from (core, load, disk_total, disk_used, gpu_util, gpu_mem, agent_cpu, agent_rss)
    yield from net_totals.values()


def _component_metrics(st: Any, nodes: list[tuple[str, Any]]) -> Iterator[Metric]:
    """Per node and component (worker, driver, raylet, gcs_server, agent...): summed over its
    processes, so the label set stays bounded however many workers come and go."""
    labels = ["node_id", "ip", "component"]
    cpu = _g("component_cpu_percent", "CPU use of a component's processes (a core = 100)", labels)
    rss = _g("component_resident_memory_bytes", "Resident memory of a component", labels)
    uss = _g("component_unique_memory_bytes", "Unique (USS) memory of a component", labels)
    count = _g("component_processes", "Processes of a component", labels)
    for nid, node in nodes:
        if node.state != "ALIVE":
            continue
        sums: dict[str, list[float]] = {}
        for w in (st.workers.get(nid) or {}).values():
            comp = str(w.get("kind") or w.get("component") or "worker")
            s = sums.setdefault(comp, [0.0, 0.0, 0.0, 0.0])
            s[0] += float(w.get("cpu_percent") or 0)
            s[1] += float(w.get("rss_bytes") or 0)
            s[2] += float(w.get("uss_bytes") or 0)
            s[3] += 1
        ip = str(node.info.get("node_ip") or "")
        for comp, s in sorted(sums.items()):
            lv = [nid, ip, comp]
            cpu.add_metric(lv, s[0])
            rss.add_metric(lv, s[1])
            uss.add_metric(lv, s[2])
            count.add_metric(lv, s[3])
    yield from (cpu, rss, uss, count)


def _cluster_metrics(st: Any) -> Iterator[Metric]:
    tasks = _g("tasks", "Tasks the dashboard knows of, by state and function", ["state", "name"])
    by_name_state: Tally = Tally()
    for (name, state), n in st.tasks.by_name_state.items():
        if n:
            by_name_state[(name or "", state)] += n
    for (name, state), n in sorted(_capped(by_name_state).items()):
        tasks.add_metric([state, name], float(n))
    yield tasks

    actors = _g("actors", "Actors by state and class", ["state", "class_name"])
    tally: Tally = Tally()
    for row in list(st.actors.values()):
        tally[(str(row.get("class_name") or ""), str(row.get("state") or ""))] += 1
    for (cls, state), n in sorted(_capped(tally).items()):
        actors.add_metric([state, cls], float(n))
    yield actors

    pending = _g(
        "pending_demands",
        "Resource shapes waiting for a node (tasks and actors), by shape",
        ["shape", "infeasible"],
    )
    shapes: Tally = Tally()
    for d in (st.cluster or {}).get("pending_demands") or ():
        shape = d.get("shape") or {}
        key = ",".join(f"{k}:{v:g}" for k, v in sorted(shape.items())) or "{}"
        shapes[(key, "true" if d.get("infeasible") else "false")] += int(d.get("count") or 1)
    for (key, infeasible), n in sorted(_capped(shapes).items()):
        pending.add_metric([key, infeasible], float(n))
    yield pending

    resources_total = _g("cluster_resources", "Resources of live nodes", ["resource"])
    resources_avail = _g("cluster_resources_available", "Resources free now", ["resource"])
    res = (st.cluster or {}).get("resources") or {}
    for name, value in sorted((res.get("total") or {}).items())[:MAX_LABEL_VALUES]:
        resources_total.add_metric([name], float(value))
    for name, value in sorted((res.get("available") or {}).items())[:MAX_LABEL_VALUES]:
        resources_avail.add_metric([name], float(value))
    yield resources_total
    yield resources_avail

    nodes = _g("nodes", "Nodes by state", ["state"])
    node_states = Tally(n.state for n in st.nodes.values())
    for state in ("ALIVE", "DEAD"):
        nodes.add_metric([state], float(node_states.get(state, 0)))
    yield nodes


def _dashboard_metrics(st: Any) -> Iterator[Metric]:
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
    dropped = CounterMetricFamily(
        "ember_dashboard_dropped", "Entries dropped past the dashboard's caps", labels=["what"]
    )
    for what, n in sorted(st.dropped.items()):
        dropped.add_metric([what], float(n))
    yield dropped
    ingested = CounterMetricFamily(
        "ember_dashboard_task_events_ingested", "Task events received from the agents", labels=[]
    )
    ingested.add_metric([], float(st.ingested.get("task_events", 0)))
    yield ingested


def _user_metrics(nodes: list[tuple[str, Any]]) -> Iterator[Metric]:
    """``ember.util.metrics`` series: the agents ship each process's snapshot in their sample
    (``user_metrics``); counters and histograms add up over the cluster, gauges keep the
    newest value."""
    snapshots: list[dict[str, Any]] = []
    for _nid, node in nodes:
        if node.state == "ALIVE":
            snapshots.extend((node.metrics or {}).get("user_metrics") or ())
    merged = merge_snapshots(snapshots)
    for m in merged["metrics"].values():
        name = f"ember_{m['name']}"
        if m["name"] in _RESERVED:
            merged["conflicts"].append(m["name"])
            continue
        keys = list(m["tag_keys"])
        doc = m["description"] or f"application metric {m['name']}"
        if m["type"] == "counter":
            fam: Metric = CounterMetricFamily(name.removesuffix("_total"), doc, labels=keys)
            for key, s in m["series"].items():
                fam.add_metric(list(key), s["value"])
        elif m["type"] == "gauge":
            fam = GaugeMetricFamily(name, doc, labels=keys)
            for key, s in m["series"].items():
                fam.add_metric(list(key), s["value"])
        else:
            fam = HistogramMetricFamily(name, doc, labels=keys)
            bounds = [*(f"{b:g}" for b in m["boundaries"]), "+Inf"]
            for key, s in m["series"].items():
                running, buckets = 0, []
                for bound, n in zip(bounds, s["buckets"], strict=True):
                    running += n
                    buckets.append((bound, float(running)))
                fam.add_metric(list(key), buckets, s["sum"])
        yield fam
    dropped = GaugeMetricFamily(
        "ember_user_metrics_dropped_series",
        "Application metric series dropped past the per-process bounds",
        labels=[],
    )
    dropped.add_metric([], float(merged["dropped_series"]))
    yield dropped
    conflicts = GaugeMetricFamily(
        "ember_user_metrics_conflicts",
        "Application metrics left out: defined twice with different types, tags or buckets, "
        "or named like one of Ember's own",
        labels=["name"],
    )
    for name in sorted(set(merged["conflicts"]))[:MAX_LABEL_VALUES]:
        conflicts.add_metric([name], 1.0)
    yield conflicts


# Names of Ember's own families (without the prefix): an application metric may not take them.
_RESERVED = frozenset(
    {
        "tasks",
        "actors",
        "nodes",
        "pending_demands",
        "cluster_resources",
        "cluster_resources_available",
        "object_store_used_bytes",
        "object_store_capacity_bytes",
        "object_store_objects",
    }
)


class _Families:
    """A collector of metric families already built (what ``_format`` turns into text)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def _format(families: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))  # type: ignore[arg-type]
    return generate_latest(registry)


def render(ctx: DashboardContext, node_id: str | None = None, cluster: bool = False) -> bytes:
    return _format(list(EmberCollector(ctx, node_id, cluster).collect()))


# Renders in flight, by (context, node_id, cluster): a scrape arriving while one with the same
# parameters renders waits for that render instead of starting its own (single flight).
_IN_FLIGHT: dict[tuple[int, str | None, bool], asyncio.Task[bytes]] = {}


async def render_shared(
    ctx: DashboardContext, node_id: str | None = None, cluster: bool = False
) -> bytes:
    """``render``, shared by concurrent scrapes with the same parameters: 20 Prometheus
    servers scraping at once cost one render, not 20 in a row on the loop. Nothing is kept
    once the render is done: the next scrape renders afresh."""
    key = (id(ctx), node_id, cluster)  # ctx is alive while its render is in the dict
    task = _IN_FLIGHT.get(key)
    if task is None or task.done():
        task = asyncio.ensure_future(_render_async(ctx, node_id, cluster))
        _IN_FLIGHT[key] = task
        task.add_done_callback(lambda t: _finished(key, t))
    # Shielded: a scraper that goes away does not cancel the render the others wait for.
    return await asyncio.shield(task)


async def _render_async(ctx: DashboardContext, node_id: str | None, cluster: bool) -> bytes:
    # The families are read from the state here, on the loop that owns it (it takes no
    # locks); the text is made from these copies in a worker thread, which leaves the loop
    # free meanwhile to take the scrapes that will share this render.
    families = list(EmberCollector(ctx, node_id, cluster).collect())
    return await asyncio.to_thread(_format, families)


def _finished(key: tuple[int, str | None, bool], task: asyncio.Task[bytes]) -> None:
    if _IN_FLIGHT.get(key) is task:
        del _IN_FLIGHT[key]
    if not task.cancelled():
        task.exception()  # retrieved: every scraper waiting got it (no "never retrieved" log)


@router.get("/metrics", response_class=Response)
async def metrics(
    node_id: Annotated[
        str | None, Query(max_length=64, description="only this node's series")
    ] = None,
    scope: Annotated[
        str | None, Query(pattern="^cluster$", description="'cluster': cluster-wide series only")
    ] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> Response:
    """Prometheus text format (exposition 0.0.4). Async on purpose: the state is read on the
    loop that owns it (which takes no locks), never beside ingestion in a worker thread;
    concurrent scrapes with the same parameters share one render (``render_shared``)."""
    if node_id is not None:
        node_id = resolve_node(ctx, node_id)  # a unique prefix works, as everywhere
    body = await render_shared(ctx, node_id=node_id, cluster=scope == "cluster")
    return Response(content=body, media_type=CONTENT_TYPE)


# -- file service discovery -----------------------------------------------------------------


def service_discovery(ctx: DashboardContext) -> list[dict[str, Any]]:
    """Prometheus ``file_sd_configs`` groups: the cluster-wide target and one per live node
    (each a ``/metrics`` URL parameter on this dashboard, which serves every node)."""
    host = ctx.host
    if host in ("0.0.0.0", "::"):  # bound everywhere: name the head node's address
        head = [n for n in ctx.state.nodes.values() if n.info.get("is_head")]
        host = str(head[0].info.get("node_ip") or "127.0.0.1") if head else "127.0.0.1"
    target = f"[{host}]:{ctx.port}" if ":" in host else f"{host}:{ctx.port}"
    extra = {"__metrics_path__": f"{ctx.prefix}/metrics"} if ctx.prefix else {}
    groups = [{"targets": [target], "labels": {"__param_scope": "cluster", **extra}}]
    for nid, node in sorted(ctx.state.nodes.items()):
        if node.state != "ALIVE":
            continue
        groups.append(
            {
                "targets": [target],
                "labels": {
                    "__param_node_id": nid,
                    "ember_node_id": nid,
                    "ember_node_ip": str(node.info.get("node_ip") or ""),
                    **extra,
                },
            }
        )
    return groups


def write_service_discovery(ctx: DashboardContext, path: str | None = None) -> str | None:
    """Writes the file (atomically) when its content changed; returns its path."""
    path = path or (os.path.join(ctx.session_dir, SD_FILE) if ctx.session_dir else None)
    if path is None:
        return None
    text = json.dumps(service_discovery(ctx), indent=1)
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


async def service_discovery_loop(ctx: DashboardContext, period: float = 2.0) -> None:
    """Keeps the file current as nodes come and go (the dashboard server runs this)."""
    while True:
        try:
            write_service_discovery(ctx)
        except OSError:
            pass  # the session dir is going away; the next round tries again
        await asyncio.sleep(period)
