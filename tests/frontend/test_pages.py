"""Each page of the browser dashboard shows the expected data of a real node's workload."""

from __future__ import annotations

import re

import ember
import psutil
import pytest
from browser_utils import open_page, text, wait_chart_points, wait_total
from ember.util.placement_group import placement_group, remove_placement_group
from ember_test_utils import wait_until

pytestmark = pytest.mark.timeout(120)


def test_overview_shows_the_cluster(page, cluster):
    url, _ = cluster
    open_page(page, url, "overview")
    page.wait_for_function(
        "document.querySelector('[data-testid=stat-nodes] .value').innerText === '1'"
    )
    assert re.search(r"\d+(\.\d+)? / 2", text(page, "[data-testid=stat-cpus] .value"))
    # The actor counts follow the table: the waiter and the infeasible actor are pending.
    page.locator("[data-testid=stat-actors] .sub", has_text="2 pending").wait_for()
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
    # Live charts are drawn from the dashboard's own history: each holds data points (uPlot
    # draws a canvas with none), and the throughput chart counts the finished tasks.
    for chart in ("cpu", "memory", "store", "throughput"):
        wait_chart_points(page, f"chart-{chart}", 1)
        assert page.locator(f"[data-testid=chart-{chart}] canvas").count() >= 1
    mem_max = float(page.get_attribute("[data-testid=chart-memory]", "data-max"))
    assert mem_max > 1e6, "the memory chart holds no real byte counts"
    page.wait_for_function(
        "Number(document.querySelector('[data-testid=chart-throughput]').dataset.max) > 0"
    )


def test_machines_lists_the_node_and_its_workers(page, cluster):
    url, _ = cluster
    open_page(page, url, "machines")
    # A node's row (not the "Nothing to show" row of a table still loading).
    row = page.locator("[data-testid=nodes-table] tbody tr[data-row-key]").first
    row.wait_for()
    assert "127.0.0.1" in row.inner_text()
    assert re.search(r"CPU: [\d.]+ / 2", row.inner_text())
    # Every figure holds a real value (the agent's sample has arrived), not a dash.
    page.wait_for_function(
        "!/–/.test(document.querySelector('[data-testid=nodes-table] tbody tr td[data-col=ram]')"
        ".innerText)"
    )

    def cell(col: str) -> str:
        return row.locator(f"td[data-col={col}]").inner_text()

    workers, cores = cell("workers").split(" / ")
    assert int(workers) >= 1 and int(cores) == psutil.cpu_count(), cell("workers")
    assert re.fullmatch(r"[\d.]+ (ms|s)|\d+m \d+s|\d+h \d+m", cell("uptime")), cell("uptime")
    assert re.fullmatch(r"[\d.]+%", cell("cpu")), cell("cpu")
    assert re.fullmatch(r"[\d.]+ [KMGT]?B / [\d.]+ [KMGT]?B", cell("ram")), cell("ram")
    assert re.fullmatch(r"[\d.]+ [KMGT]?B / [\d.]+ [KMGT]?B", cell("disk")), cell("disk")
    # Rates, then the totals since boot (which a node that talked to us has above zero).
    net = re.fullmatch(
        r"[\d.]+ [KMGT]?B/s · [\d.]+ [KMGT]?B/s \(([\d.]+) [KMGT]?B · ([\d.]+) [KMGT]?B\)",
        cell("net"),
    )
    assert net and float(net.group(1)) > 0 and float(net.group(2)) > 0, cell("net")
    row.click()
    # Expanding shows the node's processes, and the URL names the node (shareable).
    page.wait_for_selector("[data-testid=workers-table] tbody tr >> nth=2")
    assert "node=" in page.url
    kinds = page.locator("[data-testid=workers-table] tbody").inner_text()
    assert "worker" in kinds and "raylet" in kinds
    # A worker row: its pid, state (an actor's class here), uptime, CPU and memory.
    holder = page.locator("[data-testid=workers-table] tbody tr", has_text="actor CpuHolder").first
    holder.wait_for()
    wcell = {
        c: holder.locator(f"td[data-col={c}]").inner_text()
        for c in ("pid", "state", "uptime", "cpu_percent", "rss_bytes")
    }
    assert int(wcell["pid"]) == ember.get(cluster[1]["holder"].pid.remote()), wcell
    assert wcell["state"] == "actor CpuHolder", wcell
    assert re.fullmatch(r"[\d.]+ (ms|s)|\d+m \d+s", wcell["uptime"]), wcell
    assert re.fullmatch(r"[\d.]+%", wcell["cpu_percent"]), wcell
    assert re.fullmatch(r"[\d.]+ [KMG]B", wcell["rss_bytes"]), wcell
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
    # The infeasible actor is red, with the reason naming what it asked for against what
    # exists.
    bad = table.locator(".vrow.row-infeasible")
    bad.wait_for()
    reason = bad.locator("[data-col=pending_reason] .reason").get_attribute("title")
    assert re.search(r"infeasible: no node has \{CPU: 64\} \(nodes have: \{.*CPU: 2\b", reason), (
        reason
    )
    # The waiter fits the node but not what is free: yellow, asked for against free now.
    # The reason arrives live: the GCS sets it once it has tried to place the actor.
    waiting = table.locator(".vrow.row-pending", has_text="frontend_cpu_waiter").filter(
        has_text="free now"
    )
    waiting.wait_for()
    reason = waiting.locator("[data-col=pending_reason] .reason").get_attribute("title")
    assert re.search(
        r"waiting for resources \{CPU: 1\.5\} to be free \(free now: \{CPU: 1\} of "
        r"\{CPU: 2\} on node [0-9a-f]{8}\)",
        reason,
    ), reason
    assert waiting.locator(".state").inner_text() == "PENDING"
    # The class filter narrows on the server (before the page's limit); the URL carries it. In
    # the tree a match is shown under its ancestors (dimmed), so the filtered tree is the chain.
    everyone = int(table.get_attribute("data-total"))
    page.select_option("[data-testid=actor-class]", "Grandchild")
    wait_total(page, "actors-table", "==", 3)
    assert "class=Grandchild" in page.url and everyone > 3
    assert table.locator(".vrow b").all_inner_texts() == [
        "Parent(frontend_parent)",
        "Child",
        "Grandchild",
    ]
    assert indent("Child") > indent("Parent(frontend_parent)")
    assert (
        float(
            table.locator(".vrow:has(b:text-is('Child')) .cell > span").first.evaluate(
                "e => getComputedStyle(e).opacity"
            )
        )
        < 1
    ), "an ancestor shown for its match is dimmed"
    page.select_option("[data-testid=actor-class]", "")
    wait_total(page, "actors-table", "==", everyone)
    # Search narrows on the server; the URL carries it.
    page.fill("[data-testid=actor-search]", "frontend_victim")
    wait_total(page, "actors-table", "==", 1)
    assert "q=frontend_victim" in page.url
    assert "Victim" in table.locator(".vrow").first.inner_text()


def test_actors_page_lists_placement_groups(page, cluster):
    """A placed group shows its bundle's node; one no node can hold shows PENDING and why."""
    url, _ = cluster
    placed = placement_group([{"CPU": 0.01}], name="frontend_pg")
    stuck = placement_group([{"GPU": 1}], strategy="SPREAD", name="frontend_pg_stuck")
    try:
        ember.get(placed.ready(), timeout=30)
        node_id = ember.get_runtime_context().get_node_id()
        open_page(page, url, "actors")
        row = page.locator(f"[data-testid=pg-row][data-pg-id='{placed.id.hex()}']")
        row.wait_for()
        page.wait_for_selector(
            f"[data-testid=pg-row][data-pg-id='{placed.id.hex()}'][data-state=CREATED]"
        )
        text = row.inner_text()
        assert "frontend_pg" in text and placed.id.hex() in text and "PACK" in text, text
        bundle = row.locator("[data-testid=pg-bundle]")
        assert "CPU: 0.01" in bundle.inner_text()
        assert bundle.locator("[title]").get_attribute("title") == node_id
        waiting = page.locator(f"[data-testid=pg-row][data-pg-id='{stuck.id.hex()}']")
        waiting.wait_for()
        assert waiting.get_attribute("data-state") == "PENDING"
        assert "not placed" in waiting.inner_text() and "SPREAD" in waiting.inner_text()
        page.wait_for_selector(f"[data-testid=pg-row][data-pg-id='{stuck.id.hex()}'] .reason")
        assert "GPU" in waiting.locator(".reason").inner_text()
    finally:
        remove_placement_group(placed)
        remove_placement_group(stuck)


def test_tasks_summary_filters_and_traceback(page, cluster):
    url, _ = cluster
    open_page(page, url, "tasks")
    summary = page.locator("[data-testid=task-summary]")
    summary.locator("tr[data-function*='square']").wait_for()
    assert summary.locator("tr[data-function*='square'] .bar").count() == 1
    # Each bar's parts are the shares of the counts beside it (Dask's progress bars).
    for fn in ("square", "explode"):
        row = summary.locator(f"tr[data-function*='{fn}']")
        counts = [int(v) for v in row.locator("td.num").all_inner_texts()]
        finished, running, pending, failed, total = counts
        assert total == finished + running + pending + failed and total > 0, counts
        bar = row.locator(".bar")
        width = bar.evaluate("e => e.getBoundingClientRect().width")
        for part, n in zip(("finished", "running", "pending", "failed"), counts[:4], strict=True):
            w = bar.locator(f"span.{part}").evaluate("e => e.getBoundingClientRect().width")
            assert abs(w - width * n / total) < 1.5, (fn, part, w, width, counts)
    explode = [
        int(v) for v in summary.locator("tr[data-function*='explode'] td.num").all_inner_texts()
    ]
    assert explode[3] == 3 == explode[4], explode  # all three failed
    page.select_option("[data-testid=task-state]", "FAILED")
    wait_total(page, "tasks-table", "==", 3)
    assert "state=FAILED" in page.url
    first = page.locator("[data-testid=tasks-table] .vrow").first
    assert "explode" in first.inner_text()
    first.click()
    tb = page.locator("[data-testid=task-traceback]")
    tb.wait_for()
    assert "ValueError" in tb.inner_text() and "frontend test failure" in tb.inner_text()
    # Beside the open detail the table keeps the function's name readable (its column had
    # collapsed to two letters): the columns the detail repeats step aside.
    name_head = page.locator("[data-testid=tasks-table] .vhead [data-col=name]")
    assert name_head.evaluate("e => e.getBoundingClientRect().width") >= 140
    cell = first.locator("[data-col=name]")
    assert cell.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), cell.inner_text()
    assert "explode" in cell.inner_text()


def test_timeline_draws_the_task_stream(page, cluster):
    url, _ = cluster
    open_page(page, url, "timeline?window=3600")
    page.wait_for_function(
        "Number(document.querySelector('[data-testid=timeline]').dataset.slices) > 40"
    )
    # A row per worker, grouped by node: as many rows as the trace has worker threads, and
    # one group, named as the trace names the node.
    tl = page.locator("[data-testid=timeline]")
    href = page.locator("[data-testid=timeline-download]").get_attribute("href")
    trace = page.request.get(page.evaluate("h => new URL(h, document.baseURI).href", href)).json()
    nodes = {e["args"]["name"] for e in trace if e.get("name") == "process_name"}
    workers = {(e["pid"], e["tid"]) for e in trace if e.get("ph") == "X"}
    assert len(nodes) == 1 and len(workers) >= 2, (nodes, workers)
    wait_until(
        lambda: int(tl.get_attribute("data-rows")) >= len(workers),
        message=f"{len(workers)} worker rows",
    )
    assert tl.get_attribute("data-groups").split("|") == sorted(nodes)
    # Hovering a slice says what it is: fit the view, then hover the middle of the trace's
    # longest slices in view (where the page must draw them), down every row.
    page.get_by_role("button", name="Fit").click()
    canvas = page.locator("[data-testid=timeline] canvas")
    box = canvas.bounding_box()
    t0, t1 = (float(v) for v in tl.get_attribute("data-view").split(","))
    label_w = 180  # TimelineCanvas's LABEL_W: the row names, left of the plot
    in_view = [
        (min(e["ts"] + e["dur"], t1) - max(e["ts"], t0), e)
        for e in trace
        if e.get("ph") == "X" and e["ts"] < t1 and e["ts"] + e["dur"] > t0
    ]
    tip = None
    for _, e in sorted(in_view, key=lambda p: -p[0])[:3]:
        mid = (max(e["ts"], t0) + min(e["ts"] + e["dur"], t1)) / 2
        x = label_w + (mid - t0) / (t1 - t0) * (box["width"] - label_w)
        for y in range(24, int(box["height"]), 5):
            canvas.hover(position={"x": x, "y": y})
            if page.locator("[data-testid=timeline-tip]").count():
                tip = page.locator("[data-testid=timeline-tip]").inner_text()
                break
        if tip:
            break
    assert tip, f"no slice showed a tooltip ({len(in_view)} slices in view)"
    names = {e["name"] for _, e in in_view}
    assert tip.split("  ")[0] in names, (tip, sorted(names)[:20])
    # The download is the Chrome trace the page drew.
    assert any(e.get("ph") == "X" for e in trace)


def test_logs_browse_search_and_download(page, cluster):
    url, _ = cluster
    from frontend_workload import LOG_MARKER

    open_page(page, url, f"logs?q={LOG_MARKER}")
    page.wait_for_selector("[data-testid=log-files] a[data-log-file$='.out']")
    # A worker's file name is read whole (its pid and stream are at its end): none is clipped.
    clipped = page.evaluate(
        "() => [...document.querySelectorAll('[data-testid=log-files] a[data-log-file]')]"
        ".filter(a => a.scrollWidth > a.clientWidth + 1 || !a.innerText.includes("
        "a.dataset.logFile)).map(a => a.dataset.logFile)"
    )
    assert clipped == []
    # Open any file, search every file of its node, then open the worker file the search
    # found (a click on the match): its lines show the marker highlighted.
    page.locator("[data-testid=log-files] a[data-log-file]").first.click()
    page.click("[data-testid=log-search-all]")
    match = page.locator("[data-testid=log-matches] a[data-log-match^='worker']").first
    match.wait_for()
    name = match.get_attribute("data-log-match")
    assert name.endswith(".out") and LOG_MARKER in page.inner_text("[data-testid=log-matches]")
    match.click()
    assert f"file={name}" in page.url
    page.locator("[data-testid=log-view]", has_text=name).wait_for()
    page.wait_for_selector("[data-testid=log-lines] mark")
    assert page.locator("[data-testid=log-lines] mark").first.inner_text() == LOG_MARKER
    href = page.locator("[data-testid=log-download]").get_attribute("href")
    body = page.request.get(page.evaluate("h => new URL(h, document.baseURI).href", href)).text()
    assert LOG_MARKER in body


def test_logs_pick_a_node_and_a_worker(page, cluster):
    url, handles = cluster
    pid = ember.get(handles["victim"].pid.remote())
    open_page(page, url, "logs")
    links = page.locator("[data-testid=log-files] a[data-log-file]")
    links.first.wait_for()
    page.select_option("[data-testid=log-node]", index=1)
    assert "node=" in page.url
    # The worker picker lists the node's processes that have files; choosing one narrows the
    # files to its own, and the URL keeps the choice.
    choice = page.locator(f"[data-testid=log-worker] option[value$='/{pid}']")
    choice.wait_for(state="attached")
    before = links.count()
    page.select_option("[data-testid=log-worker]", choice.get_attribute("value"))
    assert f"pid={pid}" in page.url
    page.wait_for_function(
        "(pid) => { const a = [...document.querySelectorAll("
        "'[data-testid=log-files] a[data-log-file]')];"
        " return a.length > 0 && a.every(x => x.dataset.pid === pid); }",
        arg=str(pid),
    )
    assert 1 <= links.count() < before
    assert all(
        n.startswith("worker") for n in links.evaluate_all("a => a.map(x => x.dataset.logFile)")
    )
    # Back to every worker: the other files return.
    page.select_option("[data-testid=log-worker]", "")
    wait_until(lambda: links.count() == before, message=f"{before} files again")
    assert "pid=" not in page.url


def test_memory_groups_and_references(page, cluster):
    url, _ = cluster
    open_page(page, url, "memory")
    page.wait_for_selector("[data-testid=memory-groups] tbody tr[data-row-key]")
    assert "MB" in page.locator("[data-testid=memory-groups] tbody").inner_text()
    page.wait_for_selector("[data-testid=memory-table] .vrow[data-row-key]")
    # Largest first: the 2 MiB object heads the list.
    assert "2.0 MB" in page.locator("[data-testid=memory-table] .vrow").first.inner_text()
    # The column headers sort on the server: a click sorts by that column, a second click
    # reverses it, and the URL keeps the order.
    head = page.locator("[data-testid=memory-table] .vhead [data-col=object_size]")
    assert head.get_attribute("aria-sort") == "descending"

    def sizes() -> list[str]:
        return page.locator(
            "[data-testid=memory-table] .vrow[data-row-key] [data-col=object_size]"
        ).all_inner_texts()

    def as_bytes(s: str) -> float:
        v, unit = s.split()
        return float(v) * 1024 ** ["B", "KB", "MB", "GB"].index(unit)

    head.click()
    page.wait_for_selector(
        "[data-testid=memory-table] .vhead [data-col=object_size][aria-sort=ascending]"
    )
    assert "sort=object_size" in page.url and "desc=0" in page.url
    wait_until(lambda: len(sizes()) >= 2 and "2.0 MB" not in sizes()[0], message="ascending")
    got = [as_bytes(s) for s in sizes() if s != "–"]
    assert got == sorted(got) and got[-1] >= 2 * 1024 * 1024 * 0.99, got
    page.locator("[data-testid=memory-table] .vhead [data-col=reference_type]").click()
    page.wait_for_selector(
        "[data-testid=memory-table] .vhead [data-col=reference_type][aria-sort=ascending]"
    )
    wait_until(
        lambda: (
            (
                kinds := page.locator(
                    "[data-testid=memory-table] .vrow[data-row-key] [data-col=reference_type]"
                ).all_inner_texts()
            )
            and kinds == sorted(kinds)
        ),
        message="rows sorted by reference type",
    )
    page.select_option("[data-testid=memory-group]", "pid")
    assert "group=pid" in page.url
    page.wait_for_selector("[data-testid=memory-groups] tbody tr:has-text('pid')")


def test_metrics_charts_per_node(page, cluster):
    url, _ = cluster
    open_page(page, url, "metrics")
    for key in ("cpu_percent", "mem_used_bytes", "net_sent_bytes_per_s", "num_workers"):
        page.wait_for_selector(f"[data-testid=metrics-{key}] canvas")
        wait_chart_points(page, f"metrics-{key}", 1)
    assert float(page.get_attribute("[data-testid=metrics-num_workers]", "data-max")) >= 1
    assert page.get_attribute("[data-testid=grafana-link]", "href") == "http://127.0.0.1:3000"
    assert page.locator("[data-testid=prometheus-link]").count() == 0
    options = page.locator("[data-testid=metrics-node] option")
    wait_until(lambda: options.count() >= 2, message="a node in the scope selector")
    page.select_option("[data-testid=metrics-node]", index=1)
    assert "node=" in page.url
    page.wait_for_selector("[data-testid=metrics-cpu_percent] canvas")
    wait_chart_points(page, "metrics-mem_used_bytes", 1)


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


def test_an_address_changed_while_the_app_starts_is_followed(page, cluster):
    """The address changes (a typed URL, the next ``goto``) after the app's first render and
    before its router listens: the app shows the page the address names, not the first one.
    DOMContentLoaded fires once the app's module has rendered, while Preact's effects wait
    for the next frame, which is where the router subscribes to hashchange."""
    url, _ = cluster
    page.add_init_script(
        "document.addEventListener('DOMContentLoaded', () => { location.hash = '#/tasks'; })"
    )
    page.goto(f"{url}/")
    page.wait_for_selector("[data-testid=stream-status][data-status=open]")
    page.wait_for_function("document.querySelector('main')?.dataset.page === 'tasks'")
    page.locator("[data-nav=tasks].active").wait_for()
