"""A real Prometheus server (Debian's ``prometheus``) scrapes a live Ember cluster's
dashboard through the service-discovery file in the session dir; the test then asks
Prometheus's own HTTP API for the series (issue 4 §3)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request

import ember
import pytest
from ember.util.metrics import Counter, Gauge
from ember_test_utils import wait_until

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        PROMETHEUS is None, reason="Debian's prometheus is missing: run scripts/dev.sh setup"
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture
def prometheus(tmp_path):
    """Starts Prometheus on loopback with its own data dir; ``start(sd_file)`` returns its
    URL. Stopped (and waited for) at the end whatever happened."""
    procs: list[subprocess.Popen] = []

    def start(sd_file: str) -> str:
        port = _free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  scrape_timeout: 1s\n"
            "scrape_configs:\n"
            "  - job_name: ember\n"
            "    file_sd_configs:\n"
            f"      - files: ['{sd_file}']\n"
            "        refresh_interval: 1s\n"
        )
        log = open(tmp_path / "prometheus.log", "w")  # noqa: SIM115 - closed with the process
        procs.append(
            subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert procs[-1].poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False

        wait_until(ready, timeout=30, interval=0.2, message="Prometheus to be ready")
        return url

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)


def _query(url: str, promql: str) -> list[dict]:
    q = urllib.parse.urlencode({"query": promql})
    body = _get_json(f"{url}/api/v1/query?{q}")
    assert body["status"] == "success", body
    return body["data"]["result"]


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
    Gauge("scraped_driver_gauge", "set by the driver").set(42)

    url = prometheus(sd_file)

    def targets_up() -> bool:
        active = _get_json(f"{url}/api/v1/targets")["data"]["activeTargets"]
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
    assert float(series("ember_scraped_driver_gauge")[0]["value"][1]) == 42
    # Cluster-wide series come from the cluster target only (no node_id label, no duplicate).
    own = series("ember_dashboard_resident_memory_bytes")
    assert len(own) == 1 and "ember_node_id" not in own[0]["metric"]
    assert float(own[0]["value"][1]) > 0  # the head's agent runs in there: no agent series
    assert not _query(url, "ember_agent_resident_memory_bytes")
