"""A real Prometheus server (Debian's ``prometheus``) scrapes a live Ember cluster's
dashboard through the service-discovery file in the session dir; the test then asks
Prometheus's own HTTP API for the series."""

from __future__ import annotations

import json
import os

import ember
import pytest
from ember.util.metrics import Counter, Gauge
from ember_test_utils import wait_until
from prometheus_server import PrometheusServers, file_sd_job, get_json
from prometheus_server import query as _query

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def prometheus(tmp_path):
    """``start(sd_file)`` runs Prometheus over Ember's service-discovery file; stopped at the
    end whatever happened."""
    servers = PrometheusServers(tmp_path)
    yield lambda sd_file: servers.start(file_sd_job("ember", sd_file))
    servers.stop()


def test_prometheus_scrapes_every_node_and_the_cluster(ember_start, prometheus):
    ctx = ember_start(num_cpus=1)
    assert ctx.dashboard_url, "ember.init() started no dashboard"
    sd_file = os.path.join(ctx.session_dir, "prom_metrics_service_discovery.json")

    def sd_has_node() -> list | None:
        try:
            with open(sd_file) as f:
                groups = json.load(f)
        except (OSError, ValueError):
            return None
        return groups if any("__param_node_id" in g["labels"] for g in groups) else None

    groups = wait_until(sd_has_node, timeout=30, interval=0.2, message="the SD file")
    node_id = next(
        g["labels"]["__param_node_id"] for g in groups if "__param_node_id" in g["labels"]
    )
    assert ctx.node_id == node_id

    @ember.remote
    def work(i):
        Counter("scraped_calls", "calls seen by the test", tag_keys=("kind",)).inc(
            1, {"kind": "even" if i % 2 == 0 else "odd"}
        )
        return i

    assert ember.get([work.remote(i) for i in range(6)]) == list(range(6))
    Gauge("scraped_driver_setting", "set by the driver").set(42)

    url = prometheus(sd_file)

    def targets_up() -> bool:
        active = get_json(f"{url}/api/v1/targets")["data"]["activeTargets"]
        return len(active) >= 2 and all(t["health"] == "up" for t in active)

    wait_until(targets_up, timeout=60, interval=0.5, message="both Ember targets up")

    def series(promql: str, n: int = 1):
        def check():
            result = _query(url, promql)
            return result if len(result) >= n else None

        return wait_until(check, timeout=60, interval=0.5, message=promql)

    cpu = series("ember_node_cpu_percent")
    assert cpu[0]["metric"]["node_id"] == node_id and cpu[0]["metric"]["ember_node_id"] == node_id
    assert 0 <= float(cpu[0]["value"][1]) <= 100
    total = float(series("ember_node_memory_total_bytes")[0]["value"][1])
    assert total > 100 * 2**20
    assert series("ember_object_store_capacity_bytes")[0]["value"][1] != "0"
    # Network totals are counters (rate() works on them), named with _total.
    assert float(series("ember_node_network_received_bytes_total")[0]["value"][1]) > 0
    components = {
        s["metric"]["component"] for s in series("ember_component_resident_memory_bytes", 2)
    }
    assert {"raylet", "worker"} <= components or {"raylet", "agent"} <= components, components
    finished = series('ember_tasks{state="FINISHED",name=~".*work"}')
    assert float(finished[0]["value"][1]) == 6
    calls = {
        s["metric"]["kind"]: float(s["value"][1]) for s in series("ember_scraped_calls_total", 2)
    }
    assert calls == {"even": 3.0, "odd": 3.0}
    assert float(series("ember_scraped_driver_setting")[0]["value"][1]) == 42
    # Cluster-wide series come from the cluster target only (no node_id label, no duplicate).
    own = series("ember_dashboard_resident_memory_bytes")
    assert len(own) == 1 and "ember_node_id" not in own[0]["metric"]
    assert float(own[0]["value"][1]) > 0
    # The head's agent runs in the dashboard's process: its self-metrics, not its process's.
    agent = series('ember_agent_info{process="dashboard"}')
    assert agent[0]["metric"]["node_id"] == node_id
    assert float(series("ember_agent_sample_cpu_seconds_total")[0]["value"][1]) > 0
    assert not _query(url, "ember_agent_resident_memory_bytes")
