"""``ember metrics``: a real Prometheus finds both nodes of a two-node cluster through the
head's service-discovery file alone, and every query of every Grafana panel Ember ships,
evaluated by that Prometheus, returns series; with Ember's names (``export-configs`` and a
Prometheus this test starts on the exported prometheus.yml) and Ray's (``launch-prometheus
--ray-names``, then ``shutdown-prometheus``, which stops exactly that process)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import ember
import psutil
import pytest
from ember.cluster_utils import Cluster
from ember.dashboard.grafana_panels import EMBER, RAY
from ember_test_utils import assert_no_ember_children, ember_cli, free_port, wait_until
from prometheus_server import get_json, query, tool

pytestmark = pytest.mark.timeout(240)


def _cli(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [ember_cli(), "metrics", *args], capture_output=True, text=True, timeout=90, env=env
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def _wait_targets(url: str, node_ids: set[str]) -> None:
    """Until Prometheus scrapes, healthy, the cluster-wide target and one per node."""

    def up() -> bool:
        targets = get_json(f"{url}/api/v1/targets")["data"]["activeTargets"]
        healthy = [t for t in targets if t["health"] == "up"]
        nodes = {t["labels"].get("ember_node_id") for t in healthy} - {None}
        cluster = [t for t in healthy if t["discoveredLabels"].get("__param_scope") == "cluster"]
        return nodes == node_ids and len(cluster) == 1

    wait_until(up, timeout=60, interval=0.5, message=f"Prometheus at {url} to scrape both nodes")


def _every_panel_has_series(url: str, boards) -> int:
    """Each panel query (the node variable at its "All" value) returns at least one series;
    waits for those over a rate window. Returns the number of queries checked."""
    exprs = [e.replace("$node", ".*") for b in boards for p in b.panels for e, _ in p.queries]
    empty = list(exprs)
    deadline = time.monotonic() + 90
    while empty and time.monotonic() < deadline:
        empty = [e for e in empty if not query(url, e)]
        if empty:
            time.sleep(1)
    assert not empty, f"panels whose query returns no series at {url}: {empty}"
    return len(exprs)


@pytest.fixture
def cluster():
    if ember.is_initialized():
        ember.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        yield c
    finally:
        c.shutdown()
        assert_no_ember_children()


def test_prometheus_finds_both_nodes_and_every_panel_has_series(cluster, tmp_path: Path):
    binary = tool("prometheus")
    worker = cluster.add_node(num_cpus=2)
    cluster.connect()
    root = os.path.dirname(cluster.head_node.session_dir)
    node_ids = {cluster.head_node.node_id.hex(), worker.node_id.hex()}

    # What the panels plot: finished tasks, an alive actor, an object, and a demand no
    # node can meet (the pending-demand panels).
    @ember.remote
    def square(x):
        return x * x

    @ember.remote
    class Holder:
        def ping(self):
            return "pong"

    holder = Holder.remote()
    assert ember.get(holder.ping.remote()) == "pong"
    assert ember.get([square.remote(i) for i in range(20)]) == [i * i for i in range(20)]
    kept = ember.put(b"x" * 2_000_000)
    stuck = square.options(resources={"no_such_resource": 1}).remote(1)

    # Without the binary: a clear error naming how to install it.
    no_prom = {**os.environ, "PATH": str(Path(ember_cli()).parent)}
    missing = _cli("launch-prometheus", "--temp-dir", root, env=no_prom, check=False)
    assert missing.returncode == 1 and "apt-get install prometheus" in missing.stderr

    # Ember's names: the exported config, run by a Prometheus this test starts.
    out = tmp_path / "export"
    _cli("export-configs", "-o", str(out), "--temp-dir", root)
    config = (out / "prometheus.yml").read_text()
    assert f"{cluster.head_node.session_dir}/prom_metrics_service_discovery.json" in config
    # The scrapes carry the cluster token (a dashboard off loopback asks for it).
    assert f'credentials_file: "{cluster.head_node.session_dir}/cluster_token"' in config
    boards = sorted(p.name for p in (out / "grafana" / "dashboards").iterdir())
    assert boards == sorted(f"{b.uid}.json" for b in EMBER) and len(boards) == 5
    port = free_port()
    log = open(tmp_path / "prometheus.log", "w")  # noqa: SIM115 - closed below
    own = subprocess.Popen(
        [
            binary,
            f"--config.file={out / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    launched_pid = None
    try:
        # Ray's names: launch-prometheus on the same file, at the same time.
        ray_port = free_port()
        launched = _cli(
            "launch-prometheus", "--ray-names", "--port", str(ray_port), "--temp-dir", root
        )
        launched_pid = int(re.search(r"\(pid (\d+)\)", launched.stdout).group(1))
        again = _cli("launch-prometheus", "--ray-names", "--temp-dir", root)
        assert f"already runs for this session (pid {launched_pid})" in again.stdout

        ember_url, ray_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{ray_port}"
        _wait_targets(ember_url, node_ids)
        _wait_targets(ray_url, node_ids)
        assert _every_panel_has_series(ember_url, EMBER) >= 30
        assert _every_panel_has_series(ray_url, RAY) >= 15
        # The series are the cluster's: both nodes, and the demand nobody can meet.
        cpus = query(ember_url, "ember_node_cpus")
        assert {s["metric"]["node_id"] for s in cpus} == node_ids
        infeasible = query(ember_url, 'ember_pending_demands{infeasible="true"}')
        assert [s["metric"]["shape"] for s in infeasible] == ["CPU:1,no_such_resource:1"]
        ray_nodes = query(ray_url, "ray_node_cpu_count")
        assert {s["metric"]["NodeId"] for s in ray_nodes} == node_ids

        stopped = _cli("shutdown-prometheus", "--temp-dir", root)
        assert f"Stopped Prometheus (pid {launched_pid})" in stopped.stdout
        wait_until(
            lambda: (
                not psutil.pid_exists(launched_pid)
                or psutil.Process(launched_pid).status() == psutil.STATUS_ZOMBIE
            ),
            timeout=20,
            message="the launched Prometheus to exit",
        )
        launched_pid = None
        assert own.poll() is None, "shutdown-prometheus stopped another Prometheus"
        assert "No Prometheus" in _cli("shutdown-prometheus", "--temp-dir", root).stdout
    finally:
        if launched_pid is not None:
            _cli("shutdown-prometheus", "--temp-dir", root, check=False)
        own.terminate()
        own.wait(timeout=20)
        log.close()
        ember.cancel(stuck, force=True)
        del kept
