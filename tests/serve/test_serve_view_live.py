"""The Serve view and Serve's Prometheus families on a head started as users start it
(``ember start --head``) with a small Serve application under a short load: the request and
error counts the dashboard shows equal what was sent, replica rows carry their node, actor
and pid, and ``/metrics?compat=ray`` carries Ray's ``serve_*`` families with those counts.

Then, on the same head and in this order: a request that outlives ``request_timeout_s`` gets
a 408 naming the option; a SIGKILLed replica is replaced and the deployment's totals in the
view keep the dead replica's requests; and after ``ember stop`` the history dashboard
(``ember dashboard --history``) still shows the Serve view and Ray's
``/api/serve/applications/`` as Serve last ran."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import textwrap
import time

import httpx
import pytest
from ember_test_utils import ember_cli, free_port, head_cluster, history_server, wait_until
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.timeout(300)

APP_MODULE = textwrap.dedent(
    """
    import asyncio

    from ember import serve
    from starlette.requests import Request


    @serve.deployment
    class Echo:
        def __call__(self, request: Request) -> str:
            if request.query_params.get("fail"):
                raise ValueError("asked to fail")
            return "ok " + request.query_params.get("i", "")


    @serve.deployment
    class Slow:
        async def __call__(self, request: Request) -> str:
            await asyncio.sleep(float(request.query_params.get("s", "0")))
            return "slept"


    app = Echo.bind()
    slow_app = Slow.bind()
    """
)
OK, FAILED = 40, 4
TIMEOUT_S = 5.0  # http_options request_timeout_s: far above an echo's time, even under load


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve_view")
    (work / "echo_app.py").write_text(APP_MODULE)
    with head_cluster("--num-cpus", "4", "--dashboard-port", "0") as (root, port, started):
        url = re.search(r"Dashboard: (http://[0-9.:]+)", started.stdout).group(1)
        yield {"url": url, "work": work, "http": free_port(), "root": root}


def _samples(text: str) -> list:
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]


def test_the_view_counts_the_requests_sent_and_prometheus_agrees(head: dict) -> None:
    cfg = {
        "http_options": {"port": head["http"], "request_timeout_s": TIMEOUT_S},
        "applications": [
            {
                "name": "echo",
                "route_prefix": "/echo",
                "import_path": "echo_app:app",
                "runtime_env": {"working_dir": f"local://{head['work']}"},
                # a killed replica is found by its next health check (below)
                "deployments": [{"name": "Echo", "num_replicas": 2, "health_check_period_s": 1}],
            },
            {
                "name": "slow",
                "route_prefix": "/slow",
                "import_path": "echo_app:slow_app",
                "runtime_env": {"working_dir": f"local://{head['work']}"},
            },
        ],
    }
    put = httpx.put(f"{head['url']}/api/serve/applications/", json=cfg, timeout=180)
    assert put.status_code == 200, put.text
    base = f"http://127.0.0.1:{head['http']}/echo"

    def answers() -> bool:
        try:
            return httpx.get(base, params={"i": "warm"}, timeout=10).text == "ok warm"
        except httpx.HTTPError:
            return False

    wait_until(answers, 120, interval=0.5, message="the echo app answers")
    with httpx.Client(timeout=30) as client:
        for i in range(OK - 1):  # the warm-up request above was the first
            assert client.get(base, params={"i": str(i)}).status_code == 200
        for _ in range(FAILED):
            assert client.get(base, params={"fail": "1"}).status_code == 500

    def counted() -> dict | None:
        view = httpx.get(f"{head['url']}/api/serve/view", timeout=10).json()
        apps = {a["name"]: a for a in view["applications"]}
        if "echo" not in apps:
            return None
        d = apps["echo"]["deployments"][0]
        return d if d["requests_total"] == OK + FAILED else None

    d = wait_until(counted, 60, interval=0.5, message="the view counts every request sent")
    assert d["name"] == "Echo" and d["status"] == "HEALTHY"
    assert d["errors_total"] == FAILED
    assert (d["target_replicas"], d["running_replicas"]) == (2, 2)
    assert d["window"]["rate"] > 0 and d["window"]["p50_ms"] is not None
    rows = d["replicas"]
    assert len(rows) == 2 and all(r["state"] == "RUNNING" for r in rows)
    view = httpx.get(f"{head['url']}/api/serve/view", timeout=10).json()
    (head_node,) = view["proxies"]  # one node: the proxy's is the replicas' too
    assert all(r["node_id"] == head_node for r in rows), rows
    assert len({r["actor_id"] for r in rows}) == 2 and all(len(r["actor_id"]) == 32 for r in rows)
    assert all(isinstance(r["pid"], int) and r["pid"] > 0 for r in rows)
    app = view["applications"][0]
    assert (app["status"], app["route_prefix"]) == ("RUNNING", "/echo")
    deployed = [e for e in view["decisions"] if e["kind"] == "deployed" and e["app"] == "echo"]
    assert deployed and deployed[0]["deployment"] == "Echo"
    assert "2 replica(s)" in deployed[0]["message"]

    def families() -> dict | None:
        text = httpx.get(f"{head['url']}/metrics", params={"compat": "ray"}, timeout=10).text
        sums: dict[str, float] = {}
        for s in _samples(text):
            if s.labels.get("application") == "echo":
                key = s.name + ":" + s.labels.get("status_code", "")
                sums[key] = sums.get(key, 0.0) + s.value
        want = sums.get("ray_serve_deployment_request_counter_total:") == OK + FAILED
        return sums if want and sums.get("ray_serve_num_http_requests_total:200") == OK else None

    sums = wait_until(families, 30, interval=0.5, message="Ray's serve_* families count them")
    assert sums["ray_serve_num_http_requests_total:500"] == FAILED
    assert sums["ray_serve_num_http_error_requests_total:"] == FAILED
    assert sums["ray_serve_http_request_latency_ms_count:200"] == OK
    assert sums["ray_serve_deployment_processing_latency_ms_count:"] == OK + FAILED
    assert sums["ray_serve_replica_processing_queries:"] == 0
    plain = httpx.get(f"{head['url']}/metrics", timeout=10).text
    ember_counts = [
        s.value
        for s in _samples(plain)
        if s.name == "ember_serve_deployment_requests_total" and s.labels["application"] == "echo"
    ]
    assert sum(ember_counts) == OK + FAILED


def _echo(head: dict) -> dict | None:
    view = httpx.get(f"{head['url']}/api/serve/view", timeout=10).json()
    app = next((a for a in view["applications"] if a["name"] == "echo"), None)
    return {**app["deployments"][0], "metrics_time": view["metrics_time"]} if app else None


def test_a_request_past_request_timeout_s_gets_408(head: dict) -> None:
    base = f"http://127.0.0.1:{head['http']}/slow"
    started = time.monotonic()
    r = httpx.get(base, params={"s": "60"}, timeout=60)
    took = time.monotonic() - started
    assert r.status_code == 408, r.text
    assert r.text == (f"request timed out after {TIMEOUT_S}s (http_options request_timeout_s)")
    assert len(r.headers["x-request-id"]) == 32  # the proxy's own id: the client sent none
    assert TIMEOUT_S <= took < TIMEOUT_S + 20
    # the timed-out request still holds the replica; a short one is answered beside it
    assert httpx.get(base, params={"s": "0"}, timeout=30).text == "slept"


def test_a_replaced_replica_keeps_its_requests_in_the_deployments_totals(head: dict) -> None:
    before = _echo(head)
    assert before["requests_total"] == OK + FAILED and before["running_replicas"] == 2
    victim = before["replicas"][0]
    os.kill(victim["pid"], signal.SIGKILL)
    killed_at = time.time()

    def replaced() -> dict | None:
        d = _echo(head)
        ids = {r["replica_id"] for r in d["replicas"] if r["state"] == "RUNNING"}
        fresh = (d["metrics_time"] or 0) > killed_at + 1.5  # a record made after the kill
        return d if len(ids) == 2 and victim["replica_id"] not in ids and fresh else None

    after = wait_until(replaced, 90, interval=0.5, message="the killed replica is replaced")
    assert after["requests_total"] == OK + FAILED  # not only the surviving replica's
    assert after["errors_total"] == FAILED
    view = httpx.get(f"{head['url']}/api/serve/view", timeout=10).json()
    why = [e for e in view["decisions"] if e["kind"] == "replaced"]
    assert why and victim["replica_id"] in why[0]["message"]
    with httpx.Client(timeout=30) as client:
        for i in range(6):
            assert client.get(f"http://127.0.0.1:{head['http']}/echo", params={"i": i}).text == (
                f"ok {i}"
            )

    def counted() -> dict | None:
        d = _echo(head)
        return d if d["requests_total"] == OK + FAILED + 6 else None

    wait_until(counted, 30, interval=0.5, message="the new requests are counted on top")


def test_the_history_dashboard_shows_serve_after_the_cluster_stopped(head: dict) -> None:
    live = httpx.get(f"{head['url']}/api/serve/view", timeout=10).json()
    stopped = subprocess.run(
        [ember_cli(), "stop", "--temp-dir", head["root"]],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert stopped.returncode == 0, stopped.stderr
    with history_server(head["root"]) as (url, _):
        view = httpx.get(f"{url}/api/serve/view", timeout=30).json()
        assert (view["history"], view["running"], view["stopped"]) == (True, False, None)
        apps = {a["name"]: a for a in view["applications"]}
        assert set(apps) == {"echo", "slow"}
        assert (apps["echo"]["status"], apps["echo"]["route_prefix"]) == ("RUNNING", "/echo")
        echo = apps["echo"]["deployments"][0]
        assert (echo["name"], echo["status"]) == ("Echo", "HEALTHY")
        assert echo["requests_total"] == OK + FAILED + 6
        assert echo["errors_total"] == FAILED
        live_echo = next(a for a in live["applications"] if a["name"] == "echo")
        live_ids = sorted(r["replica_id"] for r in live_echo["deployments"][0]["replicas"])
        assert sorted(r["replica_id"] for r in echo["replicas"]) == live_ids
        kinds = {e["kind"] for e in view["decisions"]}
        assert {"deployed", "replaced"} <= kinds
        details = httpx.get(f"{url}/api/serve/applications/", timeout=30).json()
        assert set(details["applications"]) == {"echo", "slow"}
        echo_app = details["applications"]["echo"]
        assert (echo_app["status"], echo_app["route_prefix"]) == ("RUNNING", "/echo")
        replicas = echo_app["deployments"]["Echo"]["replicas"]
        assert sorted(r["replica_id"] for r in replicas) == live_ids
        assert details["http_options"]["request_timeout_s"] == TIMEOUT_S
