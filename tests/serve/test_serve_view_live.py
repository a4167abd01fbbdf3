"""The Serve view and Serve's Prometheus families on a head started as users start it
(``ember start --head``) with a small Serve application under a short load: the request and
error counts the dashboard shows equal what was sent, replica rows carry their node, actor
and pid, and ``/metrics?compat=ray`` carries Ray's ``serve_*`` families with those counts."""

from __future__ import annotations

import re
import textwrap

import httpx
import pytest
from ember_test_utils import free_port, head_cluster, wait_until
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.timeout(300)

APP_MODULE = textwrap.dedent(
    """
    from ember import serve
    from starlette.requests import Request


    @serve.deployment
    class Echo:
        def __call__(self, request: Request) -> str:
            if request.query_params.get("fail"):
                raise ValueError("asked to fail")
            return "ok " + request.query_params.get("i", "")


    app = Echo.bind()
    """
)
OK, FAILED = 40, 4


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve_view")
    (work / "echo_app.py").write_text(APP_MODULE)
    with head_cluster("--num-cpus", "4", "--dashboard-port", "0") as (root, port, started):
        url = re.search(r"Dashboard: (http://[0-9.:]+)", started.stdout).group(1)
        yield {"url": url, "work": work, "http": free_port()}


def _samples(text: str) -> list:
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]


def test_the_view_counts_the_requests_sent_and_prometheus_agrees(head: dict) -> None:
    cfg = {
        "http_options": {"port": head["http"]},
        "applications": [
            {
                "name": "echo",
                "route_prefix": "/echo",
                "import_path": "echo_app:app",
                "runtime_env": {"working_dir": f"local://{head['work']}"},
                "deployments": [{"name": "Echo", "num_replicas": 2}],
            }
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
    deployed = [e for e in view["decisions"] if e["kind"] == "deployed"]
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
