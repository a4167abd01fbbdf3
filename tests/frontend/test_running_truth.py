"""A task that is running reads RUNNING on every page that shows it (Overview's counts, the
Tasks summary, table and detail, the Machines page's worker, the live Timeline) and in
``/metrics``; once it ends, every page reads FINISHED without a reload."""

from __future__ import annotations

import os
import time

import ember
import httpx
import pytest
from browser_utils import open_page, wait_chart_points
from ember_test_utils import wait_until

pytestmark = pytest.mark.timeout(180)


def _running_metric(url: str, name: str) -> float | None:
    """The value of ``ember_tasks{state="RUNNING",name=<name>}`` in ``/metrics`` (None: absent)."""
    body = httpx.get(f"{url}/metrics", timeout=10).text
    for line in body.splitlines():
        if (
            line.startswith("ember_tasks{")
            and 'state="RUNNING"' in line
            and f'name="{name}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return None


def _badge(pg, selector: str) -> str:
    return pg.locator(selector).first.inner_text().strip()


def _wait_text(locator, want: str, timeout: float = 20.0) -> None:
    wait_until(
        lambda: locator.count() > 0 and locator.first.inner_text().strip() == want,
        timeout=timeout,
        message=f"{want!r} (last read: {locator.first.inner_text() if locator.count() else None!r})",
    )


def test_a_running_task_reads_running_then_finished_everywhere(browser, cluster, tmp_path):
    from frontend_workload import hold_until

    url, _ = cluster
    gate = tmp_path / "gate"
    ref = hold_until.remote(str(gate))
    released = False
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    try:
        pages = {}
        for name in ("overview", "tasks", "machines", "timeline"):
            pg = ctx.new_page()
            pg.set_default_timeout(20_000)
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pages[name] = pg

        def running_row() -> dict | None:
            rows = httpx.get(
                f"{url}/api/tasks?filter=name=hold_until&filter=state=RUNNING", timeout=10
            ).json()["items"]
            return rows[0] if rows else None

        wait_until(lambda: running_row() is not None, timeout=30, message="hold_until RUNNING")
        task = running_row()
        task_id, pid = task["task_id"], task["pid"]
        assert task["name"] == "hold_until" and pid, task
        assert _running_metric(url, "hold_until") == 1.0

        # Overview: one task running (the workload's other tasks have all ended).
        ov = pages["overview"]
        open_page(ov, url, "overview")
        _wait_text(ov.locator("[data-testid=stat-tasks-running] .value"), "1")

        # Tasks: the summary counts it running, the table row and the detail say RUNNING.
        tk = pages["tasks"]
        open_page(tk, url, f"tasks?name=hold_until&sel={task_id}")
        summary = tk.locator("[data-testid=task-summary] tr[data-function=hold_until] td.num")
        wait_until(
            lambda: summary.count() == 5 and summary.all_inner_texts()[1] == "1",
            message="the summary's running count",
        )
        row = tk.locator(f"[data-testid=tasks-table] .vrow[data-row-key='{task_id}']")
        _wait_text(row.locator("[data-col=state]"), "RUNNING")
        # The row shows the whole id: its first half is the submitter's, the same on every row.
        assert row.locator("[data-col=task_id]").inner_text().strip() == task_id
        detail = tk.locator("[data-testid=task-detail]")
        _wait_text(detail.locator("h2 .state"), "RUNNING")
        assert task_id in detail.inner_text()
        assert "RUNNING" in detail.locator("table").inner_text()  # the phase is listed

        # Machines: the worker that runs it says so.
        mc = pages["machines"]
        open_page(mc, url, f"machines?node={task['node_id']}")
        worker = mc.locator(f"[data-testid=workers-table] tbody tr[data-row-key='{pid}']")
        _wait_text(worker.locator("td[data-col=state]"), "running hold_until")

        # Timeline: the running slice is drawn (to now), and only once.
        tl = pages["timeline"]
        open_page(tl, url, "timeline?window=60")
        timeline = tl.locator("[data-testid=timeline]")
        wait_until(
            lambda: timeline.get_attribute("data-running") == "hold_until",
            message="the timeline's running slice",
        )

        gate.touch()
        released = True
        assert ember.get(ref, timeout=30) == "released"

        # Every page follows live, with no reload.
        _wait_text(row.locator("[data-col=state]"), "FINISHED")
        _wait_text(detail.locator("h2 .state"), "FINISHED")
        wait_until(
            lambda: summary.all_inner_texts()[0] == "1" and summary.all_inner_texts()[1] == "0",
            message="the summary's finished count",
        )
        _wait_text(ov.locator("[data-testid=stat-tasks-running] .value"), "0")
        wait_until(
            lambda: worker.locator("td[data-col=state]").inner_text() != "running hold_until",
            message="the worker to be idle",
        )
        wait_until(
            lambda: timeline.get_attribute("data-running") == "",
            message="no running slice left on the timeline",
        )
        wait_until(lambda: _running_metric(url, "hold_until") in (None, 0.0), message="metric 0")
    finally:
        if not released:
            gate.touch()
        ctx.close()
    assert not errors, errors


def test_drivers_are_listed_and_the_log_picker_names_processes(page, cluster):
    url, handles = cluster
    me = os.getpid()
    workers = httpx.get(f"{url}/api/workers?filter=kind=driver", timeout=10).json()["items"]
    driver = next(w for w in workers if w["pid"] == me)
    # Machines: this test's process is listed on its node as a driver, first, with its job.
    open_page(page, url, f"machines?node={driver['node_id']}")
    rows = page.locator("[data-testid=workers-table] tbody tr[data-row-key]")
    mine = page.locator(f"[data-testid=workers-table] tbody tr[data-row-key='{me}']")
    mine.wait_for()
    assert mine.locator("td[data-col=kind]").inner_text() == "driver"
    assert mine.locator("td[data-col=state]").inner_text() == f"driver of job {driver['job_id']}"
    assert rows.first.get_attribute("data-row-key") == str(me)
    # Logs: the worker picker names each process by kind, pid and what it is doing.
    pid = ember.get(handles["victim"].pid.remote())
    open_page(page, url, f"logs?node={driver['node_id']}")
    choice = page.locator(f"[data-testid=log-worker] option[value$='/{pid}']")
    choice.wait_for(state="attached")
    wait_until(
        lambda: choice.inner_text().strip() == f"worker pid {pid} · actor Victim",
        message=f"the victim's label (last: {choice.inner_text()!r})",
    )


def test_metrics_page_charts_user_metrics_and_task_functions(page, cluster):
    from frontend_workload import record_metrics, square

    url, _ = cluster
    ember.get(record_metrics.remote(7.0))
    ember.get([square.remote(i) for i in range(20)])
    open_page(page, url, "metrics")
    # The gauge a task set, charted from the dashboard's history with its value.
    gauge = "[data-testid=user-metric-frontend_queue_depth]"
    page.wait_for_selector(f"{gauge} canvas", timeout=30_000)
    wait_chart_points(page, "user-metric-frontend_queue_depth", 1, timeout=30_000)
    assert float(page.get_attribute(gauge, "data-max")) == 7.0
    assert "frontend_queue_depth (gauge)" in page.locator(gauge).inner_text()
    assert "queue=inbox" in page.locator(gauge).inner_text()
    page.wait_for_selector("[data-testid=user-metric-frontend_items] canvas")
    # Per function: the rate at which square's tasks ended, and their mean run time.
    wait_chart_points(page, "task-rate-square", 1)
    page.wait_for_function(
        "Number(document.querySelector('[data-testid=task-rate-square]').dataset.max) > 0"
    )
    wait_chart_points(page, "task-duration-square", 1)
    assert "square: tasks/s" in page.locator("[data-testid=task-rate-square]").inner_text()
    # The API behind them: whole buckets only, the newest ending no later than now.
    rates = page.request.get(f"{url}/api/metrics/task_rates?window_s=60&bucket_s=5").json()
    assert rates["times"][-1] + 5 <= time.time() + 1, rates["times"][-1]
    sq = next(f for f in rates["functions"] if f["name"] == "square")
    assert sum(sq["finished"]) >= 20 and all(d is None or d >= 0 for d in sq["mean_duration_s"]), sq
    tput = page.request.get(f"{url}/api/frontend/throughput?window_s=60&bucket_s=5").json()
    assert tput["times"][-1] + 5 <= time.time() + 1, tput["times"][-1]


@ember.remote(shared_process=True)
class Tenant:
    def __init__(self, i: int) -> None:
        self.i = i

    def pid(self) -> int:
        return os.getpid()


def test_shared_actors_hosts_show_what_they_hold_and_their_actors_are_listed_apart(page, cluster):
    """Four shared-process actors on the node's two CPUs: two host processes of two actors
    each. The Machines page says what each host holds; the Actors page, filtered by one
    host's process, lists its two actors, each its own row."""
    url, _ = cluster
    tenants = [Tenant.remote(i) for i in range(4)]
    try:
        pids = ember.get([t.pid.remote() for t in tenants], timeout=60)
        assert len(set(pids)) == 2 and all(pids.count(p) == 2 for p in pids), pids
        pid = pids[0]
        [node] = wait_until(
            lambda: httpx.get(f"{url}/api/workers?filter=pid={pid}", timeout=10).json()["items"],
            timeout=20,
            message="the host in the node's process list",
        )
        open_page(page, url, f"machines?node={node['node_id']}")
        for host in set(pids):
            row = page.locator(f"[data-testid=workers-table] tbody tr[data-row-key='{host}']")
            _wait_text(row.locator("td[data-col=state]"), "shared actors host (2 actors)")
        open_page(page, url, f"actors?pid={pid}")
        wait_until(
            lambda: page.locator("[data-testid=actors-table]").get_attribute("data-total") == "2",
            message="two actors in the host's process",
        )
        rows = page.locator("[data-testid=actors-table] .vrow").all_inner_texts()
        assert len(rows) == 2 and all("Tenant" in r and "ALIVE" in r for r in rows), rows
    finally:
        for t in tenants:
            ember.kill(t)
