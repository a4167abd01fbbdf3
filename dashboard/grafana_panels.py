"""The Grafana dashboards' panels, as data: per name set (Ember's ``ember_*`` from
``prom_ember``, Ray's from ``prom_ray``), per dashboard, each panel's title, unit and PromQL
queries with their legends. ``grafana.py`` turns them into dashboard JSON.

Every query must select series on a running cluster (a test evaluates each one in a real
Prometheus): a panel for what a cluster may lack (GPUs) is left out rather than shipped
empty. ``rate``/``increase`` only over counters (``_total``): over a gauge a falling count
would read as resets. ``$node`` is the node variable (its "All" value is ``.*``).
"""

from __future__ import annotations

from typing import NamedTuple


class Panel(NamedTuple):
    title: str
    unit: str  # Grafana's unit id
    queries: tuple[tuple[str, str], ...]  # (PromQL, legend format)


class Board(NamedTuple):
    uid: str
    title: str
    panels: tuple[Panel, ...]


def _p(title: str, unit: str, *queries: tuple[str, str]) -> Panel:
    return Panel(title, unit, queries)


_N = '{node_id=~"$node"}'
_NODE = "{{ember_node_ip}} {{node_id}}"

EMBER: tuple[Board, ...] = (
    Board(
        "ember-cluster",
        "Ember: cluster",
        (
            _p("Nodes by state", "short", ("sum by (state) (ember_nodes)", "{{state}}")),
            _p(
                "Cluster resources",
                "short",
                ("ember_cluster_resources", "{{resource}} total"),
                ("ember_cluster_resources_available", "{{resource}} free"),
            ),
            _p(
                "Pending and infeasible demands",
                "short",
                (
                    "sum by (shape, infeasible) (ember_pending_demands)",
                    "{{shape}} infeasible={{infeasible}}",
                ),
            ),
            _p(
                "Placement groups by state",
                "short",
                ("sum by (state) (ember_placement_groups)", "{{state}}"),
            ),
            _p(
                "Dashboard: its own cost",
                "percent",
                ("ember_dashboard_cpu_percent", "CPU"),
            ),
            _p(
                "Dashboard: resident memory",
                "bytes",
                ("ember_dashboard_resident_memory_bytes", "RSS"),
            ),
            _p(
                "Dropped by the dashboard's caps (per second)",
                "short",
                ("sum by (what) (rate(ember_dashboard_dropped_total[5m]))", "{{what}}"),
            ),
            _p(
                "Task events ingested per second",
                "short",
                ("rate(ember_dashboard_task_events_ingested_total[1m])", "ingested"),
            ),
        ),
    ),
    Board(
        "ember-nodes",
        "Ember: nodes",
        (
            _p("Node up", "short", (f"ember_node_up{_N}", _NODE)),
            _p("CPU use per node", "percent", (f"ember_node_cpu_percent{_N}", _NODE)),
            _p(
                "Memory per node",
                "bytes",
                (f"ember_node_memory_used_bytes{_N}", f"used {_NODE}"),
                (f"ember_node_memory_total_bytes{_N}", f"total {_NODE}"),
            ),
            _p(
                "Disk I/O",
                "Bps",
                (f"ember_node_disk_read_bytes_per_second{_N}", f"read {_NODE}"),
                (f"ember_node_disk_write_bytes_per_second{_N}", f"write {_NODE}"),
            ),
            _p(
                "Network",
                "Bps",
                (f"ember_node_network_sent_bytes_per_second{_N}", f"sent {_NODE}"),
                (f"ember_node_network_received_bytes_per_second{_N}", f"received {_NODE}"),
            ),
            _p(
                "Disk space used",
                "percentunit",
                (
                    f"ember_node_disk_used_bytes{_N} / ember_node_disk_total_bytes{_N}",
                    "{{mount}} " + _NODE,
                ),
            ),
            _p(
                "Load average (1m)",
                "short",
                ('ember_node_load_average{node_id=~"$node",period="1m"}', _NODE),
            ),
            _p(
                "CPU by component",
                "percent",
                (f"sum by (component) (ember_component_cpu_percent{_N})", "{{component}}"),
            ),
            _p(
                "Resident memory by component",
                "bytes",
                (
                    f"sum by (component) (ember_component_resident_memory_bytes{_N})",
                    "{{component}}",
                ),
            ),
            _p(
                "Agents: their own cost (CPU)",
                "percent",
                (f"rate(ember_agent_sample_cpu_seconds_total{_N}[1m]) * 100", f"sampling {_NODE}"),
                (f"ember_agent_cpu_percent{_N}", f"agent process {_NODE}"),
            ),
        ),
    ),
    Board(
        "ember-tasks-actors",
        "Ember: tasks and actors",
        (
            _p("Tasks by state", "short", ("sum by (state) (ember_tasks)", "{{state}}")),
            _p(
                "Tasks finished and failed per second",
                "short",
                ("rate(ember_tasks_finished_total[1m])", "finished"),
                ("rate(ember_tasks_failed_total[1m])", "failed"),
            ),
            _p(
                "Tasks by function (top 10)",
                "short",
                ("topk(10, sum by (name) (ember_tasks))", "{{name}}"),
            ),
            _p("Actors by state", "short", ("sum by (state) (ember_actors)", "{{state}}")),
            _p(
                "Actors by class (alive)",
                "short",
                ('sum by (class_name) (ember_actors{state="ALIVE"})', "{{class_name}}"),
            ),
            _p(
                "Agents: task events held and dropped",
                "short",
                (f"ember_agent_task_events_buffered{_N}", f"held {_NODE}"),
                (f"increase(ember_agent_task_events_dropped_total{_N}[5m])", f"dropped {_NODE}"),
            ),
        ),
    ),
    Board(
        "ember-object-store",
        "Ember: object store",
        (
            _p(
                "Object store use",
                "bytes",
                (f"ember_object_store_used_bytes{_N}", f"used {_NODE}"),
                (f"ember_object_store_capacity_bytes{_N}", f"capacity {_NODE}"),
            ),
            _p(
                "Object store fill",
                "percentunit",
                (
                    f"ember_object_store_used_bytes{_N} / ember_object_store_capacity_bytes{_N}",
                    _NODE,
                ),
            ),
            _p("Objects in the store", "short", (f"ember_object_store_objects{_N}", _NODE)),
            _p(
                "Spilled to disk",
                "bytes",
                (f"ember_object_store_spilled_bytes{_N}", f"spilled {_NODE}"),
            ),
            _p(
                "Spilling and restoring (per second)",
                "Bps",
                (f"rate(ember_object_store_bytes_spilled_total{_N}[1m])", f"spilled {_NODE}"),
                (f"rate(ember_object_store_bytes_restored_total{_N}[1m])", f"restored {_NODE}"),
            ),
        ),
    ),
    Board(
        "ember-jobs",
        "Ember: jobs",
        (
            _p("Jobs by state", "short", ("sum by (state) (ember_jobs)", "{{state}}")),
            _p("Jobs running", "short", ('ember_jobs{state="RUNNING"}', "running")),
            _p(
                "Jobs ended",
                "short",
                ('sum by (state) (ember_jobs{state=~"SUCCEEDED|FAILED|STOPPED"})', "{{state}}"),
            ),
        ),
    ),
)

_R = '{NodeId=~"$node"}'
_RNODE = "{{instance}}"

# Ray's names (``/metrics?compat=ray``): the families Ray's own Grafana panels plot, with
# Ray's labels (``State``, ``Name``, ``Component``, ``NodeId``). Ray exports no job metric
# Ember serves, so this set has no jobs dashboard.
RAY: tuple[Board, ...] = (
    Board(
        "ember-ray-cluster",
        "Ember (Ray names): cluster",
        (
            _p(
                "Nodes",
                "short",
                ("sum by (node_type) (ray_cluster_active_nodes)", "active {{node_type}}"),
                ("sum by (node_type) (ray_cluster_failed_nodes)", "failed {{node_type}}"),
            ),
            _p(
                "Logical resources used",
                "short",
                ('sum by (Name) (ray_resources{State="USED"})', "{{Name}} used"),
                ('sum by (Name) (ray_resources{State="AVAILABLE"})', "{{Name}} available"),
            ),
            _p(
                "Autoscaler: cluster resources",
                "short",
                ("autoscaler_cluster_resources", "{{resource}}"),
            ),
            _p(
                "Autoscaler: pending resources",
                "short",
                ("autoscaler_pending_resources", "{{resource}}"),
            ),
            _p(
                "Placement groups by state",
                "short",
                ("sum by (State) (ray_placement_groups)", "{{State}}"),
            ),
        ),
    ),
    Board(
        "ember-ray-nodes",
        "Ember (Ray names): nodes",
        (
            _p("Node CPU (percent)", "percent", (f"ray_node_cpu_utilization{_R}", _RNODE)),
            _p(
                "Node memory",
                "bytes",
                (f"ray_node_mem_used{_R}", f"used {_RNODE}"),
                (f"ray_node_mem_total{_R}", f"total {_RNODE}"),
            ),
            _p(
                "Node disk I/O speed",
                "Bps",
                (f"ray_node_disk_io_read_speed{_R}", f"read {_RNODE}"),
                (f"ray_node_disk_io_write_speed{_R}", f"write {_RNODE}"),
            ),
            _p(
                "Node network",
                "Bps",
                (f"ray_node_network_send_speed{_R}", f"send {_RNODE}"),
                (f"ray_node_network_receive_speed{_R}", f"receive {_RNODE}"),
            ),
            _p(
                "Node disk utilization",
                "percent",
                (f"ray_node_disk_utilization_percentage{_R}", _RNODE),
            ),
            _p(
                "Component CPU",
                "percent",
                (f"sum by (Component) (ray_component_cpu_percentage{_R})", "{{Component}}"),
            ),
            _p(
                "Component memory (RSS)",
                "decmbytes",
                (f"sum by (Component) (ray_component_rss_mb{_R})", "{{Component}}"),
            ),
        ),
    ),
    Board(
        "ember-ray-tasks-actors",
        "Ember (Ray names): tasks and actors",
        (
            _p("Tasks by state", "short", ("sum by (State) (ray_tasks)", "{{State}}")),
            _p(
                "Tasks by name (top 10)",
                "short",
                ("topk(10, sum by (Name) (ray_tasks))", "{{Name}}"),
            ),
            _p("Actors by state", "short", ("sum by (State) (ray_actors)", "{{State}}")),
            _p("Actors by name", "short", ("sum by (Name) (ray_actors)", "{{Name}}")),
        ),
    ),
    Board(
        "ember-ray-object-store",
        "Ember (Ray names): object store",
        (
            _p(
                "Object store memory by location",
                "bytes",
                (
                    f"sum by (Location, instance) (ray_object_store_memory{_R})",
                    "{{Location}} {{instance}}",
                ),
            ),
            _p(
                "Object store memory (logical resource)",
                "bytes",
                ('sum by (State) (ray_resources{Name="object_store_memory"})', "{{State}}"),
            ),
        ),
    ),
)
