"""Actions and live behaviour: Kill, Profile, live updates without reload, a dropped stream
that recovers, the URL as the view's state, a URL prefix, and the dark theme."""

from __future__ import annotations

import ember
import pytest
from browser_utils import open_page, total, wait_total
from ember.exceptions import RayActorError

pytestmark = pytest.mark.timeout(150)


def test_kill_removes_an_actor(page, cluster):
    url, handles = cluster
    open_page(page, url, "actors?q=frontend_victim&state=ALIVE")
    wait_total(page, "actors-table", "==", 1)
    page.locator("[data-testid=actors-table] .vrow").first.click()
    page.click("[data-testid=actor-kill]")
    # A confirmation first; Cancel kills nothing.
    page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
    assert page.get_by_role("dialog").count() == 0
    assert ember.get(handles["victim"].ping.remote(), timeout=10) == 1
    assert page.get_attribute("[data-testid=actor-detail]", "data-state") == "ALIVE"
    assert page.locator("[data-testid=kill-result]").count() == 0
    # Then Kill, accepted.
    page.click("[data-testid=actor-kill]")
    page.click("[data-testid=confirm-kill]")
    page.wait_for_selector("[data-testid=actor-detail][data-state=DEAD]", timeout=30_000)
    # The live list (state=ALIVE) drops it without a reload.
    wait_total(page, "actors-table", "==", 0)
    with pytest.raises(RayActorError):
        ember.get(handles["victim"].ping.remote(), timeout=10)


def test_profile_shows_a_flame_graph(page, cluster, tmp_path):
    url, handles = cluster
    spinner = handles["spinner"]
    stop = str(tmp_path / "stop-spinning")
    # Keeps the actor on CPU while py-spy records (10 s), for at most 40 s.
    busy = spinner.spin_for.remote(40.0, stop)
    # The tree view (its screenshot is the README's): pick the spinner from the tree.
    open_page(page, url, "actors?view=tree")
    page.locator("[data-testid=actors-table] .vrow:has-text('frontend_spinner')").click()
    page.click("[data-testid=actor-profile-10]")
    flame = page.locator("[data-testid=flamegraph]")
    flame.wait_for(timeout=60_000)
    assert int(flame.get_attribute("data-samples")) > 10
    # Hovering the frames names the function the actor spent its time in.
    canvas = flame.locator("canvas")
    box = canvas.bounding_box()
    names = set()
    for y in range(5, int(box["height"]), 18):
        canvas.hover(position={"x": box["width"] / 2, "y": y})
        tip = page.locator(".flame .tip")
        if tip.count():
            names.add(tip.inner_text().split(" ")[0])
    assert "busy_loop_for_profile" in names or "spin_for" in names, names
    page.mouse.move(0, 0)  # no tooltip in the screenshot
    open(stop, "w").close()
    ember.get(busy, timeout=60)


def test_live_updates_arrive_without_reload(page, cluster):
    url, _ = cluster
    from frontend_workload import square

    open_page(page, url, "tasks?name=square")
    wait_total(page, "tasks-table", ">=", 40)
    before = total(page, "tasks-table")
    page.evaluate("window.__noReload = 1")
    ember.get([square.remote(i) for i in range(25)])
    wait_total(page, "tasks-table", ">=", before + 25, timeout=30_000)
    assert page.evaluate("window.__noReload") == 1


def test_a_dropped_stream_shows_a_banner_and_recovers(page, cluster):
    url, _ = cluster
    from frontend_workload import square

    open_page(page, url, "tasks?name=square")
    wait_total(page, "tasks-table", ">=", 40)
    # The network goes away: the open stream is cut and reconnects fail until it is back.
    page.context.set_offline(True)
    page.evaluate("window.emberStream.drop()")
    page.wait_for_selector("[data-testid=stream-banner]")
    assert "Lost the live connection" in page.locator("[data-testid=stream-banner]").inner_text()
    page.context.set_offline(False)
    page.wait_for_selector("[data-testid=stream-status][data-status=open]", timeout=30_000)
    assert page.locator("[data-testid=stream-banner]").count() == 0
    # And live updates flow again.
    before = total(page, "tasks-table")
    ember.get([square.remote(i) for i in range(5)])
    wait_total(page, "tasks-table", ">=", before + 5, timeout=30_000)


def test_the_url_holds_the_view_and_survives_a_reload(page, cluster):
    url, _ = cluster
    open_page(page, url, "actors")
    page.select_option("[data-testid=actor-state]", "ALIVE")
    page.select_option("[data-testid=actor-view]", "tree")
    page.locator("[data-testid=actor-node] option").nth(1).wait_for(state="attached")
    page.select_option("[data-testid=actor-node]", index=1)
    node = page.locator("[data-testid=actor-node]").input_value()
    page.locator("[data-testid=actor-job] option").nth(1).wait_for(state="attached")
    page.select_option("[data-testid=actor-job]", index=1)
    job = page.locator("[data-testid=actor-job]").input_value()
    assert "state=ALIVE" in page.url and "view=tree" in page.url
    assert f"node={node}" in page.url and f"job={job}" in page.url
    page.reload()
    page.wait_for_selector("[data-testid=actors-table] .vrow[data-row-key]")
    assert page.locator("[data-testid=actor-state]").input_value() == "ALIVE"
    assert page.locator("[data-testid=actor-view]").input_value() == "tree"
    assert page.locator("[data-testid=actor-node]").input_value() == node
    assert page.locator("[data-testid=actor-job]").input_value() == job


def test_works_under_a_url_prefix(page, cluster):
    """Behind a proxy that forwards /ember/... with X-Forwarded-Prefix, every URL the app
    uses is relative, so pages and the stream work under the prefix."""
    url, _ = cluster
    page.set_extra_http_headers({"X-Forwarded-Prefix": "/ember"})
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url))
    page.goto(f"{url}/ember/#/machines")
    page.wait_for_selector("[data-testid=stream-status][data-status=open]")
    page.wait_for_selector("[data-testid=nodes-table] tbody tr[data-row-key]")
    api = [u for u in seen if "/api/" in u]
    assert api and all("/ember/api/" in u for u in api), api


def test_dark_theme(page, cluster):
    url, _ = cluster
    open_page(page, url, "overview")
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.click("[data-testid=theme-toggle]")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    dark = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert light != dark
    page.reload()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
