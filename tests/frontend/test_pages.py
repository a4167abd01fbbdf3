"""Each page of the browser dashboard shows the expected data of a real node's workload."""

from __future__ import annotations

import re

import ember
import pytest
from browser_utils import open_page, text, wait_total
from ember_test_utils import wait_until

pytestmark = pytest.mark.timeout(120)


def test_overview_shows_the_cluster(page, cluster):
    url, _ = cluster
    open_page(page, url, "overview")
    page.wait_for_function(
        "document.querySelector('[data-testid=stat-nodes] .value').innerText === '1'"
    )
    assert re.search(r"\d+(\.\d+)? / 2", text(page, "[data-testid=stat-cpus] .value"))
    page.wait_for_function(
        "Number(document.querySelector('[data-testid=stat-tasks-failed] .value').innerText) >= 3"
    )
    errors = page.locator(
        "[data-testid=recent-errors] tr", has_text="ValueError: frontend test failure"
    )
    errors.first.wait_for()
    # Each error keeps its traceback one click away.
    errors.first.locator("summary").click()
    assert "Traceback" in errors.first.locator("pre").inner_text()
    # The throughput chart's series counts the workload's tasks where they ended.
    tput = page.request.get(f"{url}/api/frontend/throughput?window_s=600").json()
    assert sum(tput["finished"]) >= 50 and sum(tput["failed"]) >= 3, tput
    # Live charts are drawn from the dashboard's own history.
    for chart in ("cpu", "memory", "store", "throughput"):
        assert page.locator(f"[data-testid=chart-{chart}] canvas").count() >= 1


def test_machines_lists_the_node_and_its_workers(page, cluster):
    url, _ = cluster
    open_page(page, url, "machines")
    row = page.locator("[data-testid=nodes-table] tbody tr").first
    row.wait_for()
    assert "127.0.0.1" in row.inner_text()
    assert re.search(r"CPU: [\d.]+ / 2", row.inner_text())
    row.click()
    # Expanding shows the node's processes, and the URL names the node (shareable).
    page.wait_for_selector("[data-testid=workers-table] tbody tr >> nth=2")
    assert "node=" in page.url
    kinds = page.locator("[data-testid=workers-table] tbody").inner_text()
    assert "worker" in kinds and "raylet" in kinds
    # The node's errors are one click away: the failed tasks' tracebacks are listed.
    errors = page.locator("[data-testid=node-errors] .note", has_text="ValueError: frontend test")
    errors.first.wait_for()


def test_actors_tree_reasons_and_search(page, cluster):
    url, handles = cluster
    open_page(page, url, "actors?view=tree")
    table = page.locator("[data-testid=actors-table]")
    try:
        page.wait_for_selector("[data-testid=actors-table] .vrow:has-text('Grandchild')")
    except Exception:
        import urllib.request

        print("API:", urllib.request.urlopen(url + "/api/actors").read().decode()[:3000])
        raise
    # Parent -> Child -> Grandchild: in that order, each one level deeper than its creator.
    titles = table.locator(".vrow b").all_inner_texts()
    i = titles.index("Parent(frontend_parent)")
    assert titles[i + 1 : i + 3] == ["Child", "Grandchild"], titles

    def indent(title: str) -> float:
        row = table.locator(f".vrow:has(b:text-is('{title}'))")
        return float(
            row.locator(".cell > span").first.evaluate("e => parseFloat(e.style.paddingLeft)")
        )

    assert indent("Parent(frontend_parent)") < indent("Child") < indent("Grandchild")
    # The infeasible actor is red, with the reason naming what it asked for.
    bad = table.locator(".vrow.row-infeasible")
    bad.wait_for()
    assert "infeasible" in bad.inner_text() and "CPU" in bad.inner_text()
    # Search narrows on the server; the URL carries it.
    page.fill("[data-testid=actor-search]", "frontend_victim")
    wait_total(page, "actors-table", "==", 1)
    assert "q=frontend_victim" in page.url
    assert "Victim" in table.locator(".vrow").first.inner_text()


def test_tasks_summary_filters_and_traceback(page, cluster):
    url, _ = cluster
    open_page(page, url, "tasks")
    summary = page.locator("[data-testid=task-summary]")
    summary.locator("tr[data-function*='square']").wait_for()
    assert summary.locator("tr[data-function*='square'] .bar").count() == 1
    page.select_option("[data-testid=task-state]", "FAILED")
    wait_total(page, "tasks-table", "==", 3)
    assert "state=FAILED" in page.url
    first = page.locator("[data-testid=tasks-table] .vrow").first
    assert "explode" in first.inner_text()
    first.click()
    tb = page.locator("[data-testid=task-traceback]")
    tb.wait_for()
    assert "ValueError" in tb.inner_text() and "frontend test failure" in tb.inner_text()


def test_timeline_draws_the_task_stream(page, cluster):
    url, _ = cluster
    open_page(page, url, "timeline?window=3600")
    page.wait_for_function(
        "Number(document.querySelector('[data-testid=timeline]').dataset.slices) > 40"
    )
    # Hovering a slice says what it is: fit the view, then sweep a row until a tip appears.
    page.get_by_role("button", name="Fit").click()
    canvas = page.locator("[data-testid=timeline] canvas")
    box = canvas.bounding_box()
    found = False
    for y in range(40, min(int(box["height"]), 400), 6):
        for x in range(200, int(box["width"]) - 10, 25):
            canvas.hover(position={"x": x, "y": y})
            if page.locator("[data-testid=timeline-tip]").count():
                found = True
                break
        if found:
            break
    assert found, "no slice showed a tooltip"
    # The download is the Chrome trace the page drew.
    href = page.locator("[data-testid=timeline-download]").get_attribute("href")
    trace = page.request.get(page.evaluate("h => new URL(h, document.baseURI).href", href)).json()
    assert any(e.get("ph") == "X" for e in trace)


def test_logs_browse_search_and_download(page, cluster):
    url, _ = cluster
    from frontend_workload import LOG_MARKER

    open_page(page, url, f"logs?q={LOG_MARKER}")
    page.wait_for_selector("[data-testid=log-files] a[data-log-file$='.out']")
    # Find the worker file holding the marker with the node-wide search, then open it.
    files = page.locator(
        "[data-testid=log-files] a[data-log-file^='worker'][data-log-file$='.out']"
    )
    n = files.count()
    for i in range(n):
        files.nth(i).click()
        page.wait_for_selector("[data-testid=log-view]")
        try:
            page.wait_for_selector("[data-testid=log-lines] mark", timeout=1500)
            break
        except Exception:
            continue
    assert page.locator("[data-testid=log-lines] mark").first.inner_text() == LOG_MARKER
    href = page.locator("[data-testid=log-download]").get_attribute("href")
    body = page.request.get(page.evaluate("h => new URL(h, document.baseURI).href", href)).text()
    assert LOG_MARKER in body


def test_memory_groups_and_references(page, cluster):
    url, _ = cluster
    open_page(page, url, "memory")
    page.wait_for_selector("[data-testid=memory-groups] tbody tr[data-row-key]")
    assert "MB" in page.locator("[data-testid=memory-groups] tbody").inner_text()
    page.wait_for_selector("[data-testid=memory-table] .vrow[data-row-key]")
    # Largest first: the 2 MiB object heads the list.
    assert "2.0 MB" in page.locator("[data-testid=memory-table] .vrow").first.inner_text()
    page.select_option("[data-testid=memory-group]", "pid")
    assert "group=pid" in page.url
    page.wait_for_selector("[data-testid=memory-groups] tbody tr:has-text('pid')")


def test_metrics_charts_per_node(page, cluster):
    url, _ = cluster
    open_page(page, url, "metrics")
    for key in ("cpu_percent", "mem_used_bytes", "net_sent_bytes_per_s"):
        page.wait_for_selector(f"[data-testid=metrics-{key}] canvas")
    assert page.get_attribute("[data-testid=grafana-link]", "href") == "http://127.0.0.1:3000"
    assert page.locator("[data-testid=prometheus-link]").count() == 0
    options = page.locator("[data-testid=metrics-node] option")
    wait_until(lambda: options.count() >= 2, message="a node in the scope selector")
    page.select_option("[data-testid=metrics-node]", index=1)
    assert "node=" in page.url
    page.wait_for_selector("[data-testid=metrics-cpu_percent] canvas")


def test_logs_follow_new_lines_live(page, cluster):
    url, handles = cluster
    victim = handles["victim"]
    pid = ember.get(victim.pid.remote())
    files = page.request.get(f"{url}/api/logs?filter=pid={pid}&filter=stream=out").json()["items"]
    assert files, f"no .out log file for pid {pid}"
    f = files[0]
    open_page(page, url, f"logs?node={f['node_id']}&file={f['name']}")
    page.wait_for_selector("[data-testid=log-view]")
    assert page.locator("[data-testid=log-follow]").is_checked()
    ember.get(victim.say.remote("a line printed after the page opened"))
    page.locator(
        "[data-testid=log-lines]", has_text="a line printed after the page opened"
    ).wait_for()


def test_timeline_zoom_and_pan(page, cluster):
    url, _ = cluster
    open_page(page, url, "timeline?window=300")
    page.wait_for_function(
        "Number(document.querySelector('[data-testid=timeline]').dataset.slices) > 40"
    )
    canvas = page.locator("[data-testid=timeline] canvas")
    box = canvas.bounding_box()
    axis = page.locator("[data-testid=timeline]").get_attribute("data-view")
    canvas.hover(position={"x": box["width"] * 0.7, "y": 60})
    page.mouse.wheel(0, -600)  # zoom in around the cursor
    zoomed = page.locator("[data-testid=timeline]").get_attribute("data-view")
    assert zoomed != axis
    assert not page.locator("[data-testid=timeline-follow]").is_checked()  # zooming stops following
    t0, t1 = (float(v) for v in zoomed.split(","))
    a0, a1 = (float(v) for v in axis.split(","))
    assert t1 - t0 < a1 - a0
    # Drag to pan: the same span, earlier.
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + 60)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.8, box["y"] + 60, steps=5)
    page.mouse.up()
    p0, p1 = (
        float(v)
        for v in page.locator("[data-testid=timeline]").get_attribute("data-view").split(",")
    )
    assert abs((p1 - p0) - (t1 - t0)) < 1 and p0 < t0
