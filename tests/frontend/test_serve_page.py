"""The Serve page in headless Chromium against a real node running a small Serve application
(``serve.run`` in this process, its proxy on a free port) under a light, steady load: the
deployment's live request rate is above 0 while the load runs, its replica rows show their
state with links to their node, actor and logs, and the controller's deploy decision shows
with its reason."""

from __future__ import annotations

import threading

import ember
import httpx
import pytest
from browser_utils import open_page
from ember import serve
from ember_test_utils import free_port, wait_until


@serve.deployment(num_replicas=2)
class Echo:
    def __call__(self, request) -> str:
        return "ok"


@pytest.fixture(scope="module")
def cluster(_module_node_cleanup):
    """What the browser tests' ``page`` fixture opens: this node's dashboard."""
    if ember.is_initialized():
        ember.shutdown()
    ctx = ember.init(num_cpus=4)
    port = free_port()
    serve.start(http_options={"port": port})
    serve.run(Echo.bind(), name="echo", route_prefix="/echo")
    yield ctx.dashboard_url.rstrip("/"), {"port": port}
    serve.shutdown()


@pytest.fixture
def load(cluster):
    """About 20 requests a second to the app until the test ends."""
    stop = threading.Event()
    sent = [0]

    def run() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                client.get(f"http://127.0.0.1:{cluster[1]['port']}/echo")
                sent[0] += 1
                stop.wait(0.05)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    yield sent
    stop.set()
    t.join(timeout=15)


def test_the_serve_page_shows_a_live_request_rate_and_the_replicas(page, cluster, load) -> None:
    url = cluster[0]
    wait_until(lambda: load[0] > 20, 30, message="the load runs")
    open_page(page, url, "serve")
    block = page.locator("[data-testid=serve-deployment][data-app=echo][data-deployment=Echo]")
    block.wait_for()
    # the live rate, from the counters the controller publishes each second, > 0 under load
    page.wait_for_function(
        "Number(document.querySelector('[data-testid=serve-deployment][data-deployment=Echo]"
        " [data-testid=request-rate]')?.dataset.value) > 0",
        timeout=30_000,
    )
    assert block.locator("[data-testid=replicas-count]").inner_text() == "2 / 2"
    rows = block.locator("[data-testid=replica-row]")
    assert rows.count() == 2
    view = httpx.get(f"{url}/api/serve/view", timeout=10).json()
    replicas = view["applications"][0]["deployments"][0]["replicas"]
    for r in replicas:
        row = block.locator(f"[data-testid=replica-row][data-replica='{r['replica_id']}']")
        assert "RUNNING" in row.inner_text()
        assert row.locator("[data-testid=actor-link]").get_attribute("title") == r["actor_id"]
        assert row.locator("[data-testid=node-link]").get_attribute("title") == r["node_id"]
        assert row.locator("[data-testid=worker-link]").inner_text() == str(r["pid"])
    app = page.locator("[data-testid=serve-app][data-app=echo]")
    assert "RUNNING" in app.locator("h2").inner_text() and "/echo" in app.locator("h2").inner_text()
    decision = page.locator("[data-testid=serve-decision]", has_text="deployed").first
    assert "2 replica(s)" in decision.inner_text()
