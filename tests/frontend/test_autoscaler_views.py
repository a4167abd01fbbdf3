"""The autoscaler everywhere it is read, against a real ``AutoscalingCluster`` (fake_multinode:
worker nodes are real ``ember start`` processes) and the status record its real monitor
writes: a 2-CPU task on a 1-CPU head adds a 2-CPU node, and once the task is done the idle
node goes.

- the Config page in headless Chromium: the node type's current count going 0 -> 1, the
  launch decision's reason, the masked SSH key;
- ``ember status`` (through the GCS, and through the dashboard's URL, as subprocesses), the
  ``autoscaler_*`` families on ``/metrics`` (both name sets), the scaling events, while
  scaled up;
- after the idle timeout: the count back to 0, a terminate decision, its event and timeline
  mark, ``ember_autoscaler_stopped_nodes_total``.

One cluster for the module (the tests run in order; each polls for the state it reads).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import ember
import httpx
import pytest
from browser_utils import open_page
from ember.cluster_utils import AutoscalingCluster
from ember_test_utils import wait_until
from prometheus_client.parser import text_string_to_metric_families

# Heartbeats often and a stopped node declared dead in seconds, so the test takes seconds.
FAST = {"EMBER_HEARTBEAT_INTERVAL": "0.2", "EMBER_NODE_DEATH_TIMEOUT": "2"}
SECRET_KEY_PATH = "/keys/never-shown.pem"
IDLE_TIMEOUT_S = 6.0


# Autouse: started before the browser, whose sync API keeps an event loop running on this
# thread (the cluster's start and stop run their own loops here).
@pytest.fixture(scope="module", autouse=True)
def scaler():
    """The cluster, connected: a 1-CPU head, up to two 2-CPU ``cpu_node``s removed after
    6 s idle, an SSH key in its config (which no reader may show)."""
    if ember.is_initialized():
        ember.shutdown()
    cluster = AutoscalingCluster(
        head_resources={"CPU": 1},
        worker_node_types={
            "cpu_node": {"resources": {"CPU": 2}, "node_config": {}, "max_workers": 2}
        },
        idle_timeout_minutes=IDLE_TIMEOUT_S / 60,
        auth={"ssh_user": "ember", "ssh_private_key": SECRET_KEY_PATH},
    )
    cluster.start(env=FAST)
    try:
        cluster.cluster.connect()
        yield cluster
    finally:
        if ember.is_initialized():
            ember.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="module")
def cluster(scaler):
    """What the browser tests' ``page`` fixture opens: the head's dashboard."""
    url = scaler.cluster.head_node.dashboard_url.rstrip("/")
    assert url, "the head started no dashboard"
    return url, {}


@pytest.fixture(scope="module")
def http(cluster):
    with httpx.Client(base_url=cluster[0], timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def busy(scaler):
    """A 2-CPU task holding a ``cpu_node`` until the release file appears (it cannot run on
    the 1-CPU head): (its ref, the release file's path). Started on first use."""
    release = os.path.join(tempfile.mkdtemp(prefix="ember-scalerview-"), "release")

    @ember.remote(num_cpus=2)
    def hold(path: str) -> str:
        deadline = time.monotonic() + 300
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.1)
        return ember.get_runtime_context().get_node_id()

    return hold.remote(release), release


def _samples(text: str) -> dict[tuple, float]:
    """{(sample name, sorted label pairs): value} of a /metrics text."""
    return {
        (smp.name, tuple(sorted(smp.labels.items()))): smp.value
        for fam in text_string_to_metric_families(text)
        for smp in fam.samples
    }


def _status(http: httpx.Client) -> dict:
    return http.get("/api/autoscaler/status").json()


def _type(status: dict, name: str) -> dict:
    """The type's row, or {} before the autoscaler's first record (polls read on)."""
    return next((t for t in status.get("node_types_view") or [] if t["name"] == name), {})


def _launches(status: dict) -> list[dict]:
    return [
        d for d in (status.get("record") or {}).get("decisions") or [] if d["action"] == "launch"
    ]


def test_the_config_page_shows_the_cluster_scaling_up(page, cluster, http, request) -> None:
    url, _ = cluster
    wait_until(lambda: _status(http).get("fresh"), 60, 0.2, "no fresh status record")
    open_page(page, url, "config")
    row = page.locator("[data-testid=node-types-table] tr[data-node-type=cpu_node]")
    current = row.locator("[data-testid=type-current]")
    assert row.locator("[data-testid=type-max]").inner_text() == "2"
    assert current.inner_text() == "0"
    # The masked secret: the key's path never reaches the page, "***" stands for it.
    config = page.locator("[data-testid=cluster-config]").inner_text()
    assert '"ssh_private_key": "***"' in config and SECRET_KEY_PATH not in config

    request.getfixturevalue("busy")  # a 2-CPU task: no node has room
    page.wait_for_function(
        "document.querySelector('[data-testid=node-types-table] tr[data-node-type=cpu_node] "
        "[data-testid=type-current]')?.textContent === '1'",
        timeout=120_000,
    )
    status = _status(http)
    [launch] = _launches(status)
    reason = page.locator("[data-testid=decisions-table] tr[data-action=launch]").first
    assert reason.locator("[data-testid=decision-reason]").inner_text() == launch["reason"]
    assert launch["node_type"] == "cpu_node" and launch["reason"]
    # The launched instance's row, its node a link to the node's page.
    [inst] = [
        i
        for i in status["record"]["instances"]
        if i["node_type"] == "cpu_node" and i["state"] == "running"
    ]
    row = page.locator(f"[data-testid=instances-table] tr[data-instance={inst['instance_id']}]")
    assert row.locator("[data-testid=node-link]").get_attribute("title") == inst["node_id"]


def test_status_metrics_and_events_while_scaled_up(scaler, http, busy) -> None:
    status = wait_until(
        lambda: (s := _status(http)) and _type(s, "cpu_node").get("current") == 1 and s,
        120,
        0.2,
        "the cpu_node never ran",
    )
    [node] = [
        i
        for i in status["record"]["instances"]
        if i["node_type"] == "cpu_node" and i["state"] == "running"
    ]
    # ember status as a user runs it, through the GCS and through the dashboard's URL: the
    # same record, Ray's layout.
    head_temp = os.path.dirname(scaler.cluster.head_node.session_dir)
    for where in (
        ["--address", scaler.address, "--temp-dir", head_temp],
        ["--address", str(http.base_url)],
    ):
        cli = subprocess.run(
            [sys.executable, "-m", "ember.cli.main", "status", *where],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "EMBER_TOKEN": scaler.cluster.token.decode()},
        )
        assert cli.returncode == 0, cli.stderr
        lines = cli.stdout.splitlines()
        assert lines[0].startswith("======== Autoscaler status: "), cli.stdout
        assert f" 1 cpu_node: node_{node['node_id']} ({node['ip']})" in lines, cli.stdout

    ember_set = _samples(http.get("/metrics").text)
    assert ember_set[("ember_autoscaler_active_nodes", (("node_type", "cpu_node"),))] == 1.0
    assert ember_set[("ember_autoscaler_started_nodes_total", ())] >= 1.0
    ray_set = _samples(http.get("/metrics", params={"compat": "ray"}).text)
    [active] = [
        v
        for (name, labels), v in ray_set.items()
        if name == "autoscaler_active_nodes" and ("NodeType", "cpu_node") in labels
    ]
    assert active == 1.0

    events = http.get("/api/events", params={"filter": "source=autoscaler"}).json()["items"]
    launch = next(e for e in events if e["kind"] == "AUTOSCALER_LAUNCH")
    assert launch["message"].startswith("autoscaler launching 1 cpu_node node")


def test_the_idle_node_goes_and_every_reader_says_so(scaler, http, busy) -> None:
    ref, release = busy
    open(release, "w").close()
    ember.get(ref, timeout=120)
    status = wait_until(
        lambda: (
            (s := _status(http))
            and _type(s, "cpu_node").get("current") == 0
            and any(d["action"] == "terminate" for d in s["record"]["decisions"])
            and s
        ),
        120,
        0.3,
        "the idle cpu_node was never removed",
    )
    terminate = next(d for d in status["record"]["decisions"] if d["action"] == "terminate")
    assert terminate["node_type"] == "cpu_node" and terminate["reason"]
    assert [p["by_type"].get("cpu_node") for p in status["sizes"]][-1] == 0
    assert 1 in [p["by_type"].get("cpu_node") for p in status["sizes"]]  # the chart's rise

    events = http.get("/api/events", params={"filter": "source=autoscaler"}).json()["items"]
    assert any(e["kind"] == "AUTOSCALER_TERMINATE" for e in events)
    trace = http.get("/api/timeline").json()
    marks = [e["name"] for e in trace if e.get("ph") == "i"]
    assert "launch cpu_node" in marks and "terminate cpu_node" in marks
    # Counted on the tick after the provider drops the node: read until it shows.
    wait_until(
        lambda: (
            _samples(http.get("/metrics").text).get(
                ("ember_autoscaler_stopped_nodes_total", ()), 0.0
            )
            >= 1.0
        ),
        30,
        0.3,
        "ember_autoscaler_stopped_nodes_total never counted the removed node",
    )
