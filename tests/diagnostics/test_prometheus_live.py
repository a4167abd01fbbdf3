"""``/metrics`` of a live node with something in every subject: finished, failed, running and
infeasible tasks, an actor, a placement group, an object in the store, application metrics.
A running task reads RUNNING (its worker reports it); an actor's creation task counts as a
task, as in Ray.

- Ember's set passes the real ``promtool check metrics`` with no lint output.
- Every family it declares has samples, with true values (what the workload made, what the
  machine has), except those whose subject this node lacks, each checked to be absent.
- The Ray-compatible set (``?compat=ray``), scraped by a real Prometheus, answers Ray's own
  default Grafana panel queries with the workload's values.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import ember
import psutil
import pytest
from ember.util.metrics import Counter, Gauge
from ember.util.placement_group import placement_group, remove_placement_group
from ember_test_utils import assert_no_ember_children, wait_until
from prometheus_client.parser import text_string_to_metric_families
from prometheus_server import PrometheusServers, file_sd_job, get_json, query, tool

pytestmark = pytest.mark.timeout(240)

NUM_CPUS = 4
WORK = 6  # finished tasks of ``work``
BIG = 8_000_000  # bytes of the object kept in the store


@ember.remote
def work(i: int) -> int:
    Counter("live_calls", "calls of work()", tag_keys=("parity",)).inc(
        1, {"parity": "even" if i % 2 == 0 else "odd"}
    )
    return i


@ember.remote(max_retries=0)
def boom() -> None:
    raise ValueError("meant to fail")


@ember.remote
def sleeper(path: str) -> bool:
    deadline = time.monotonic() + 200
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


@ember.remote(num_cpus=1)
class Holder:
    def ping(self) -> str:
        return "pong"


class Workload:
    def __init__(self, ctx: Any, node_id: str, session_dir: str, refs: list) -> None:
        self.url = ctx.dashboard_url
        self.node_id = node_id
        self.session_dir = session_dir
        self.refs = refs

    def text(self, query_string: str = "") -> str:
        with urllib.request.urlopen(f"{self.url}/metrics{query_string}", timeout=10) as resp:
            return resp.read().decode()

    def node(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/api/nodes/{self.node_id}", timeout=10) as r:
            return json.loads(r.read())


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    """One node for the module, with every subject present; stopped at the end."""
    if ember.is_initialized():
        ember.shutdown()
    release = str(tmp_path_factory.mktemp("sleeper") / "release")
    ctx = ember.init(num_cpus=NUM_CPUS)
    try:
        # The placement group first: reserved before any task has run.
        pg = placement_group([{"CPU": 1}])
        assert pg.wait(30), "the placement group was not placed"
        holder = Holder.remote()
        assert ember.get(holder.ping.remote(), timeout=60) == "pong"
        assert ember.get([work.remote(i) for i in range(WORK)], timeout=60) == list(range(WORK))
        with pytest.raises(Exception, match="meant to fail"):
            ember.get(boom.remote(), timeout=60)
        running = sleeper.remote(release)
        infeasible = work.options(num_cpus=64).remote(0)
        big = ember.put(b"x" * BIG)
        Gauge("live_driver_setting", "set by the driver").set(42)
        Gauge("tasks", "named like one of Ember's own families").set(1)
        yield Workload(ctx, ctx.node_id, ctx.session_dir, [holder, running, infeasible, big])
        remove_placement_group(pg)
    finally:
        with open(release, "w"):
            pass
        ember.shutdown()
        assert_no_ember_children()


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(fams: dict[str, Any], metric: str, labels: dict[str, str] | None = None) -> Any:
    """The one sample ``metric`` with these labels (regex values), or None."""
    family = fams.get(metric) or fams.get(metric.removesuffix("_total"))
    found = [
        s.value
        for s in (family.samples if family else ())
        if s.name == metric
        and all(re.fullmatch(v, s.labels.get(k, "")) for k, v in (labels or {}).items())
    ]
    assert len(found) <= 1, f"{metric}{labels} matches {len(found)} samples"
    return found[0] if found else None


def _settle(read: Callable[[], str], checks: Callable[[dict], list[str]], timeout: float = 60):
    """Scrapes until every check holds (the GCS poll and the agents' samples lag a second or
    two); fails with what still did not hold at the deadline."""
    last: list[str] = []

    def ok() -> dict | None:
        nonlocal last
        fams = _families(read())
        last = checks(fams)
        return fams if not last else None

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fams = ok()
        if fams is not None:
            return fams
        time.sleep(0.5)
    pytest.fail("still wrong at the deadline:\n" + "\n".join(last))


def _expect(fams: dict, wants: dict[tuple, Callable[[float | None], bool]]) -> list[str]:
    wrong = []
    for (name, *pairs), good in wants.items():
        labels = dict(pairs)
        value = _value(fams, name, labels)
        if not good(value):
            wrong.append(f"{name}{labels} = {value}")
    return wrong


def test_promtool_accepts_metrics(workload):
    promtool = tool("promtool")

    def everything_present() -> str | None:
        text = workload.text()
        wanted = ('state="RUNNING"', "ember_live_calls_total", 'state="CREATED"} 1.0')
        return text if all(w in text for w in wanted) else None

    text = wait_until(everything_present, timeout=60, interval=0.5, message="the workload")
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, ""), done.stdout + done.stderr


def test_every_family_has_true_samples(workload):
    eq = lambda want: lambda v: v == want  # noqa: E731 - a table of one-line checks
    positive = lambda v: v is not None and v > 0  # noqa: E731
    cpus = float(psutil.cpu_count())
    nid = workload.node_id
    wants: dict[tuple, Callable[[float | None], bool]] = {
        ("ember_node_up", ("node_id", nid)): eq(1),
        ("ember_node_cpus", ("node_id", nid)): eq(cpus),
        ("ember_node_memory_total_bytes",): eq(float(psutil.virtual_memory().total)),
        ("ember_node_metrics_age_seconds",): lambda v: v is not None and v < 10,
        ("ember_cluster_resources", ("resource", "CPU")): eq(NUM_CPUS),
        # The placement group's bundle, the actor and the running task hold one CPU each.
        ("ember_cluster_resources_available", ("resource", "CPU")): eq(NUM_CPUS - 3),
        ("ember_pending_demands", ("shape", "CPU:64"), ("infeasible", "true")): eq(1),
        ("ember_tasks", ("state", "RUNNING"), ("name", ".*sleeper")): eq(1),
        ("ember_tasks", ("state", "FINISHED"), ("name", ".*work")): eq(WORK),
        ("ember_tasks", ("state", "PENDING_NODE_ASSIGNMENT"), ("name", ".*work")): eq(1),
        ("ember_tasks_finished_total",): eq(WORK + 2),  # and Holder.__init__, Holder.ping
        ("ember_tasks_failed_total",): eq(1),
        ("ember_actors", ("state", "ALIVE"), ("class_name", "Holder")): eq(1),
        ("ember_placement_groups", ("state", "CREATED")): eq(1),
        ("ember_placement_groups", ("state", "PENDING")): eq(0),
        ("ember_nodes", ("state", "ALIVE")): eq(1),
        ("ember_object_store_used_bytes",): lambda v: v is not None and v >= BIG,
        ("ember_object_store_objects",): lambda v: v is not None and v >= 1,
        ("ember_live_calls_total", ("parity", "even")): eq(WORK / 2),
        ("ember_live_driver_setting",): eq(42),
        ("ember_user_metrics_conflicts", ("name", "tasks")): eq(1),
        ("ember_component_processes", ("component", "raylet")): eq(1),
        ("ember_component_processes", ("component", "gcs_server")): eq(1),
        ("ember_component_processes", ("component", "worker")): lambda v: v and v >= 2,
        ("ember_agent_info", ("node_id", nid), ("process", "dashboard")): eq(1),
        ("ember_agent_sample_cpu_seconds_total",): positive,
        ("ember_agent_sample_duration_seconds",): positive,
        ("ember_agent_task_events_dropped_total",): eq(0),
        ("ember_dashboard_task_events_ingested_total",): positive,
        ("ember_dashboard_resident_memory_bytes",): positive,
    }
    fams = _settle(workload.text, lambda f: _expect(f, wants))
    tracked = _value(fams, "ember_dashboard_tasks_tracked")
    # WORK, the failed, running and infeasible tasks, and the actor's creation and call.
    assert tracked == sum(s.value for s in fams["ember_tasks"].samples) == WORK + 5
    # The node's own sample says which subjects it lacks; their families must be empty.
    sample = workload.node()["metrics"]
    absent = set()
    if not sample.get("gpus"):
        absent |= {"ember_node_gpu_utilization_percent", "ember_node_gpu_memory_used_bytes"}
    if sample["agent"]["in_dashboard"]:  # no agent in a process of its own on this node
        absent |= {"ember_agent_cpu_percent", "ember_agent_resident_memory_bytes"}
    empty = {name for name, f in fams.items() if not f.samples}
    assert empty == absent


def test_ray_panels_over_real_prometheus(workload, tmp_path):
    """Ray's default dashboard queries (typed from its panels, template variables filled as
    Grafana does for "All" and this session) against Prometheus scraping ``?compat=ray``."""
    text = workload.text("?compat=ray")
    fams = _families(text)
    assert fams and all(n.startswith(("ray_", "autoscaler_")) for n in fams), sorted(fams)
    lint = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True
    )
    # Ray's own names break the naming lint, nothing else: the text parses.
    ray_style = re.compile(
        r"\S+ (label names should be written in 'snake_case' not 'camelCase'"
        r'|non-histogram and non-summary metrics should not have "_count" suffix'
        r'|non-counter metrics should not have "_total" suffix'
        r"|metric names should not contain abbreviated units)"
    )
    bad = [ln for ln in (lint.stdout + lint.stderr).splitlines() if not ray_style.fullmatch(ln)]
    assert not bad, bad

    sd_file = os.path.join(workload.session_dir, "prom_metrics_service_discovery.json")
    servers = PrometheusServers(tmp_path)
    try:
        url = servers.start(file_sd_job("ray", sd_file, {"compat": "ray"}))
        _ray_panels(url, os.path.basename(workload.session_dir), workload)
    finally:
        servers.stop()


# Ray's panels filter every query on these (its dashboards' global filters).
GLOBAL_FILTERS = 'SessionName=~"$SessionName",ray_io_cluster=~"$Cluster"'


# Ray's dashboard variables as Grafana fills them with "All" selected (each variable's
# ``allValue``; a custom variable without one becomes the alternation of its options).
ALL = {"$Instance": ".+", "$Cluster": ".*", "$RayNodeType": "(head|worker)"}


def _fill(expr: str, session: str) -> str:
    """A panel's expression as Grafana sends it: the filters in, the variables filled."""
    expr = expr.replace("{{", "{").replace("}}", "}").replace("{global_filters}", GLOBAL_FILTERS)
    expr = expr.replace("$SessionName", session)
    for variable, value in ALL.items():
        expr = expr.replace(variable, value)
    return expr


def _by(result: list[dict], label: str | None = None) -> dict[str, float]:
    return {(r["metric"].get(label, "") if label else ""): float(r["value"][1]) for r in result}


def _ray_panels(url: str, session: str, workload: Workload) -> None:
    cpus = float(psutil.cpu_count())
    mem_total = float(psutil.virtual_memory().total)
    task_state = (
        'sum(max_over_time(ray_tasks{{IsRetry="0",State=~"FINISHED|FAILED",'
        'instance=~"$Instance",{global_filters}}}[14d])) by (State) or '
        'clamp_min(sum(ray_tasks{{IsRetry="0",State!~"FINISHED|FAILED",'
        'instance=~"$Instance",{global_filters}}}) by (State), 0)'
    )
    max_cpus = 'sum(autoscaler_cluster_resources{{resource="CPU",{global_filters}}})'
    pending_cpus = 'sum(autoscaler_pending_resources{{resource="CPU",{global_filters}}})'
    plus = f"({max_cpus} or vector(0)) + ({pending_cpus} or vector(0))"
    panels: list[tuple[str, str, str | None, Callable[[dict[str, float]], bool]]] = [
        (
            "Scheduler Task State",
            task_state,
            "State",
            lambda v: (
                v.get("FINISHED") == WORK + 2
                and v.get("FAILED") == 1
                and v.get("RUNNING") == 1
                and v.get("PENDING_NODE_ASSIGNMENT") == 1
            ),
        ),
        (
            "Requested Live Tasks by Name",
            'clamp_min(sum(ray_tasks{{IsRetry="0",State!~"FINISHED|FAILED",'
            'instance=~"$Instance",{global_filters}}}) by (Name), 0)',
            "Name",
            lambda v: (
                sorted((k.rsplit(".", 1)[-1], n) for k, n in v.items())
                == [("sleeper", 1), ("work", 1)]
            ),
        ),
        (
            "Scheduler Actor State",
            'sum(ray_actors{{Source="gcs",{global_filters}}}) by (State)',
            "State",
            lambda v: v == {"ALIVE": 1},
        ),
        (
            "Live Actors by Name",
            'sum(ray_actors{{State!="DEAD",Source="executor",NodeAddress=~"$Instance",'
            "{global_filters}}}) by (Name)",
            "Name",
            lambda v: v == {"Holder": 1},
        ),
        (
            "Scheduler CPUs (logical slots): usage",
            'sum(ray_resources{{Name="CPU",State="USED",instance=~"$Instance",'
            "{global_filters}}}) by (instance)",
            None,
            lambda v: list(v.values()) == [3.0],
        ),
        (
            "Scheduler CPUs (logical slots): MAX",
            'sum(ray_resources{{Name="CPU",instance=~"$Instance",{global_filters}}})',
            None,
            lambda v: v == {"": NUM_CPUS},
        ),
        (
            "Scheduler CPUs (logical slots): MAX + PENDING",
            f"({plus} and {plus} > ({max_cpus} or vector(0)))",
            None,
            lambda v: v == {"": NUM_CPUS + 64.0},
        ),
        (
            "Scheduler Placement Groups",
            "sum(ray_placement_groups{{{global_filters}}}) by (State)",
            "State",
            lambda v: v.get("CREATED") == 1 and v.get("PENDING") == 0,
        ),
        (
            "Object Store Memory",
            'sum(ray_object_store_memory{{instance=~"$Instance",{global_filters}}}) by (Location)',
            "Location",
            lambda v: v.get("MMAP_SHM", 0) >= BIG,
        ),
        (
            "Object Store Memory: MAX",
            'sum(ray_resources{{Name="object_store_memory",instance=~"$Instance",'
            "{global_filters}}})",
            None,
            lambda v: v.get("", 0) > BIG,
        ),
        (
            "Node CPU (hardware utilization): head",
            'sum(ray_node_cpu_utilization{{instance=~"$Instance", IsHeadNode="true", '
            '{global_filters}}} * ray_node_cpu_count{{instance=~"$Instance",{global_filters}}} '
            "/ 100) by (instance)",
            "instance",
            lambda v: len(v) == 1 and 0 <= next(iter(v.values())) <= cpus,
        ),
        (
            "Node CPU (hardware utilization): MAX",
            'sum(ray_node_cpu_count{{instance=~"$Instance",{global_filters}}})',
            None,
            lambda v: v == {"": cpus},
        ),
        (
            "Node Memory (heap + object store): MAX",
            'sum(ray_node_mem_total{{instance=~"$Instance",{global_filters}}})',
            None,
            lambda v: v == {"": mem_total},
        ),
        (
            "Node Memory Percentage: head",
            'sum(ray_node_mem_used{{instance=~"$Instance", IsHeadNode="true", {global_filters}}}'
            '/ray_node_mem_total{{instance=~"$Instance", IsHeadNode="true", {global_filters}}}'
            " * 100) by (instance)",
            "instance",
            lambda v: len(v) == 1 and 0 < next(iter(v.values())) < 100,
        ),
        (
            "Node Memory by Component",
            '(sum(ray_component_rss_mb{{instance=~"$Instance",{global_filters}}} * 1e6) by '
            '(Component)) - (sum(ray_component_mem_shared_bytes{{instance=~"$Instance",'
            "{global_filters}}}) by (Component))",
            "Component",
            lambda v: (
                {"raylet", "gcs", "workers", "dashboard"} <= set(v)
                and all(x > 0 for x in v.values())
            ),
        ),
        (
            "Node CPU by Component",
            'sum(ray_component_cpu_percentage{{instance=~"$Instance",{global_filters}}}) '
            "by (Component) / 100",
            "Component",
            lambda v: {"raylet", "gcs", "workers", "dashboard"} <= set(v),
        ),
        (
            "Node Disk: MAX",
            'sum(ray_node_disk_free{{instance=~"$Instance",{global_filters}}}) + '
            'sum(ray_node_disk_usage{{instance=~"$Instance",{global_filters}}})',
            None,
            lambda v: v.get("", 0) > 0,
        ),
        (
            "Node Network: receive",
            'sum(ray_node_network_receive_speed{{instance=~"$Instance",{global_filters}}}) '
            "by (instance)",
            "instance",
            lambda v: len(v) == 1,
        ),
        (
            "Node Count (Ray 2.x before the autoscaler metrics)",
            "sum(ray_cluster_active_nodes{{{global_filters}}}) by (node_type)",
            "node_type",
            lambda v: v.get("head") == 1,
        ),
        (
            "Node Count",
            "sum(autoscaler_active_nodes{{{global_filters}}}) by (NodeType)",
            "NodeType",
            lambda v: v.get("head") == 1,
        ),
        (
            "Cluster Utilization: memory",
            'sum(ray_node_mem_used{{instance=~"$Instance",{global_filters}}}) / on() '
            '(sum(ray_node_mem_total{{instance=~"$Instance",{global_filters}}})) * 100',
            None,
            lambda v: 0 < v.get("", 0) < 100,
        ),
        (
            "an application's metric, as Ray names it",
            "sum(ray_live_calls_total{{{global_filters}}}) by (parity)",
            "parity",
            lambda v: v == {"even": WORK / 2, "odd": WORK / 2},
        ),
    ]
    wrong: dict[str, Any] = {}

    def all_right() -> bool:
        wrong.clear()
        for title, expr, label, good in panels:
            values = _by(query(url, _fill(expr, session)), label)
            if not good(values):
                wrong[title] = values
        return not wrong

    try:
        wait_until(all_right, timeout=90, interval=1.0, message="Ray's panels to show the workload")
    except pytest.fail.Exception:
        pytest.fail(f"panels still wrong: {json.dumps(wrong, indent=1)}")
    # The dashboard's variables: the session and the instances come from this series.
    labels = f"{url}/api/v1/label/{{}}/values?match[]=ray_node_network_receive_speed"
    assert session in get_json(labels.format("SessionName"))["data"]
    assert len(get_json(labels.format("instance"))["data"]) == 1
    # The per-node panels are per node: the service-discovery file names each node's target.
    instance = next(iter(_by(query(url, 'ray_node_cpu_count{IsHeadNode="true"}'), "instance")))
    assert instance.endswith(":" + workload.node_id[:8]), instance
