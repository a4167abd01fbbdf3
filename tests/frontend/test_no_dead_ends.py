"""No dead ends, and figures that say their age, read in the browser on one 2-node cluster:

- from the Tasks page a failing task's detail shows the lines that task printed (not those
  of the task before it on the same worker), its ids are links;
- an actor restarted twice reads 2 restarts and its job on the Actors page;
- an actor waiting in a placement group's bundle says the group's name and the bundle;
- the Events page filters by severity;
- a node whose raylet is SIGKILLed greys its row and says when it was last seen;
- ``ember dashboard --history`` never says "Live" nor "CPU now".
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import ember
import httpx
import pytest
from browser_utils import ARTIFACTS, open_page
from ember.cluster_utils import Cluster
from ember_test_utils import (
    FAST_FAILURE_ENV,
    ember_cli,
    history_server,
    wait_until,
    write_history_session,
)

pytestmark = pytest.mark.timeout(240)


@ember.remote(resources={"head_only": 1})
def speak(tag: str, fail: bool = False) -> int:
    print(f"{tag}: first line")
    print(f"{tag}: second line")
    if fail:
        raise ValueError(f"{tag} gives up")
    return os.getpid()


@ember.remote(num_cpus=0, max_restarts=3)
class Phoenix:
    def pid(self) -> int:
        return os.getpid()

    def die(self) -> None:
        os._exit(1)


@ember.remote(num_cpus=1)
class Trainer:
    def ready(self) -> bool:
        return True


@pytest.fixture(scope="module")
def two_nodes(_module_node_cleanup):
    """A head (2 CPUs) and a far node (1 CPU) with their dashboard; yields (cluster, url).
    Set up before ``browser`` (each test names it first): Playwright's sync API keeps an
    event loop running on this thread, and the cluster's own calls run one there."""
    if ember.is_initialized():
        ember.shutdown()
    cluster = Cluster(env=FAST_FAILURE_ENV)
    try:
        cluster.add_node(num_cpus=2, resources={"head_only": 1})
        cluster.add_node(num_cpus=1, resources={"far": 1})
        ctx = cluster.connect(log_to_driver=False)
        url = ctx.dashboard_url.rstrip("/")
        wait_until(
            lambda: len(httpx.get(f"{url}/api/nodes", timeout=10).json()["items"]) == 2,
            30,
            0.2,
            "both nodes on the dashboard",
        )
        yield cluster, url
    finally:
        ember.shutdown()
        cluster.shutdown()


def _new_page(browser):
    ctx = browser.new_context(viewport={"width": 1500, "height": 950})
    pg = ctx.new_page()
    pg.set_default_timeout(20_000)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    return ctx, pg, errors


def _shot(pg, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def test_a_failing_task_reaches_its_own_log_lines(two_nodes, browser):
    _, url = two_nodes
    pid = ember.get(speak.remote("calm"))
    bad = speak.remote("angry", fail=True)
    with pytest.raises(ValueError):
        ember.get(bad)
    task_id = bad.task_id().hex()
    http = httpx.Client(base_url=url, timeout=10)
    row = wait_until(
        lambda: (r := http.get(f"/api/tasks/{task_id}").json()).get("state") == "FAILED" and r,
        30,
        0.2,
        "the failure on the dashboard",
    )
    assert row["pid"] == pid, "the two tasks ran on one reused worker"
    ctx, pg, errors = _new_page(browser)
    try:
        open_page(pg, url, "tasks?state=FAILED")
        pg.get_by_text(task_id, exact=True).click()  # click 1: the task; its log is in the detail
        log = pg.get_by_test_id("task-log")
        log.wait_for()
        assert log.inner_text().strip() == "angry: first line\nangry: second line"
        detail = pg.get_by_test_id("task-detail")
        # Its ids are links: the job, the node, the worker's pid (its logs).
        job_link = detail.get_by_test_id("job-link")
        assert job_link.inner_text() == row["job_id"]
        assert detail.get_by_test_id("node-link").get_attribute("href") == (
            f"#/machines?node={row['node_id']}"
        )
        worker = detail.get_by_test_id("worker-link")
        assert worker.inner_text() == str(pid)
        _shot(pg, "task_log")
        worker.click()
        pg.wait_for_url(re.compile(rf"#/logs\?node={row['node_id']}&pid={pid}"))
    finally:
        ctx.close()
    assert not errors, errors


@ember.remote(num_cpus=1)
def plan() -> str:
    return "planned"


def test_a_task_in_a_placement_group_links_its_group(two_nodes, browser):
    from ember.util.placement_group import placement_group, remove_placement_group

    _, url = two_nodes
    group = placement_group([{"CPU": 1}], name="planners")
    ember.get(group.ready(), timeout=60)
    try:
        ref = plan.options(placement_group=group).remote()
        assert ember.get(ref) == "planned"
        task_id, group_id = ref.task_id().hex(), group.id.hex()
        http = httpx.Client(base_url=url, timeout=10)
        row = wait_until(
            lambda: (
                (r := http.get(f"/api/tasks/{task_id}").json()).get("state") == "FINISHED" and r
            ),
            30,
            0.2,
            "the task on the dashboard",
        )
        assert row["placement_group_id"] == group_id
        # Ray's state API has the same column (a detail one, as in Ray).
        ray_rows = http.get(
            "/api/v0/tasks",
            params={
                "filter_keys": "task_id",
                "filter_predicates": "=",
                "filter_values": task_id,
                "detail": "true",
            },
        ).json()["data"]["result"]["result"]
        assert [r["placement_group_id"] for r in ray_rows] == [group_id]
        ctx, pg, errors = _new_page(browser)
        try:
            open_page(pg, url, f"tasks?sel={task_id}")
            link = pg.get_by_test_id("task-detail").get_by_test_id("pg-link")
            link.wait_for()
            assert link.get_attribute("href") == f"#/actors?pg={group_id}"
            link.click()
            pg.wait_for_url(re.compile(rf"#/actors\?pg={group_id}"))
        finally:
            ctx.close()
        assert not errors, errors
    finally:
        remove_placement_group(group)


def test_actors_show_restarts_job_and_a_pending_reason_in_user_terms(two_nodes, browser):
    from ember.util.placement_group import placement_group

    _, url = two_nodes
    phoenix = Phoenix.options(name="phoenix").remote()
    for _ in range(2):
        before = ember.get(phoenix.pid.remote())
        with pytest.raises(Exception):  # noqa: B017 - the call dies with its worker
            ember.get(phoenix.die.remote())
        wait_until(lambda b=before: _pid_or_none(phoenix) not in (None, b), 60, 0.2, "the restart")
    group = placement_group([{"CPU": 1}], name="trainers")
    ember.get(group.ready(), timeout=60)
    first = Trainer.options(placement_group=group, placement_group_bundle_index=0).remote()
    assert ember.get(first.ready.remote())
    second = Trainer.options(
        placement_group=group, placement_group_bundle_index=0, name="second-trainer"
    ).remote()
    job_id = ember.get_runtime_context().get_job_id()
    ctx, pg, errors = _new_page(browser)
    try:
        open_page(pg, url, "actors?q=phoenix")
        table = pg.get_by_test_id("actors-table")
        restarts = table.get_by_test_id("actor-restarts")
        wait_until(
            lambda: restarts.count() == 1 and restarts.first.inner_text() == "2",
            30,
            0.2,
            f"2 restarts on the page (first read: {table.inner_text()[:400]!r})",
        )
        assert table.get_by_test_id("job-link").first.inner_text() == job_id
        assert table.get_by_test_id("actor-restarts").first.inner_text() == "2"
        open_page(pg, url, "actors?q=second-trainer")
        reason = pg.get_by_test_id("actor-reason").first
        # What is free there comes with the node's reports (a heartbeat behind the first
        # Trainer's lease): the reason says so once they do.
        want = "placement group 'trainers', bundle 0: needs {CPU: 1}, free {CPU: 0}"
        wait_until(
            lambda: reason.count() and reason.inner_text().startswith(want),
            30,
            0.2,
            f"the pending reason (first read: {reason.inner_text() if reason.count() else None!r})",
        )
        text = reason.inner_text()
        assert "_group_" not in text
        _shot(pg, "actor_pending_reason")
    finally:
        ctx.close()
    assert not errors, errors
    # `ember get actors ID` says why it waits too (a YAML comment after Ray's row).
    actor_id = second._actor_id.hex()
    out = subprocess.run(
        [ember_cli(), "get", "actors", actor_id, "--address", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert (
        f"# actor {actor_id} is pending: placement group 'trainers', bundle 0: needs {{CPU: 1}}"
        in out.stdout
    ), out.stdout


def _pid_or_none(actor) -> int | None:
    try:
        return ember.get(actor.pid.remote(), timeout=5)
    except Exception:
        return None


def test_events_page_filters_by_severity(two_nodes, browser):
    _, url = two_nodes
    http = httpx.Client(base_url=url, timeout=10)
    wait_until(
        lambda: (
            http.get("/api/events", params={"filter": "severity=WARNING"}).json()["total"]
            and http.get("/api/events", params={"filter": "severity=ERROR"}).json()["total"]
        ),
        30,
        0.2,
        "warnings and errors among the events",
    )
    ctx, pg, errors = _new_page(browser)
    try:
        open_page(pg, url, "events")
        rows = pg.get_by_test_id("event-row")
        rows.first.wait_for()
        for severity in ("ERROR", "WARNING"):
            pg.get_by_test_id("event-severity").select_option(severity)
            pg.wait_for_function(
                "(s) => { const r = [...document.querySelectorAll('[data-testid=event-row]')];"
                " return r.length > 0 && r.every((x) => x.dataset.severity === s); }",
                arg=severity,
            )
            assert f"severity={severity}" in pg.url
        pg.get_by_test_id("event-severity").select_option("ERROR")
        pg.get_by_text("task speak failed").first.wait_for()
        _shot(pg, "events")
        # A refresh that a live event scheduled before the filter changed must fetch the new
        # filter's rows: it once fetched the old one's and showed them until the next event.
        only = (
            "(s) => [...document.querySelectorAll('[data-testid=event-row]')]"
            ".every((x) => x.dataset.severity === s)"
        )
        for _ in range(3):
            pg.get_by_test_id("event-severity").select_option("")
            speak.remote("race", fail=True)  # an ERROR event, on its way to the page
            time.sleep(0.6)  # (arrives within the 1 s gap the page keeps between refreshes)
            pg.get_by_test_id("event-severity").select_option("WARNING")
            time.sleep(2.0)  # past that gap: a stale refresh would have landed by now
            pg.wait_for_function(only, arg="WARNING", timeout=5_000)
    finally:
        ctx.close()
    assert not errors, errors


def test_a_dead_node_greys_and_says_when_it_was_last_seen(two_nodes, browser):
    cluster, url = two_nodes
    far = cluster.worker_nodes[0]
    far_id = far.node_id.hex()
    far.procs["raylet"].send_signal(signal.SIGKILL)
    far.procs["raylet"].wait(10)
    http = httpx.Client(base_url=url, timeout=10)
    dead = wait_until(
        lambda: next(
            (
                n
                for n in http.get("/api/nodes").json()["items"]
                if n["node_id"] == far_id and n["state"] == "DEAD"
            ),
            None,
        ),
        60,
        0.2,
        "the far node dead on the dashboard",
    )
    assert dead["last_seen"] < time.time() and dead["num_workers"] == 0  # none live
    status = http.get("/api/cluster_status").json()
    assert status["resources"]["total"].get("CPU") == 2  # the head's only
    ctx, pg, errors = _new_page(browser)
    try:
        open_page(pg, url, "machines")
        row = pg.locator(f"[data-testid=nodes-table] tr[data-row-key='{far_id}']")
        row.wait_for()
        pg.wait_for_function(
            f"document.querySelector(\"tr[data-row-key='{far_id}']\")?.classList.contains('row-dead')"
        )
        seen = row.get_by_test_id("node-last-seen").inner_text()
        assert re.fullmatch(r"last seen ([\d.]+ ms|[\d.]+ s|\d+m \d+s) ago", seen), seen
        assert "last: " in row.inner_text()  # its CPU and workers: the last report's, greyed
        head = pg.locator(f"tr[data-row-key='{cluster.head_node.node_id.hex()}']")
        assert "last seen" not in head.inner_text()
        assert head.get_by_test_id("node-store").inner_text().count(" / ") == 1
        _shot(pg, "dead_node")
    finally:
        ctx.close()
    assert not errors, errors


def test_history_mode_never_says_live(browser, tmp_path):
    name = "session_2026-02-01_00-00-00_1"
    write_history_session(str(tmp_path), name, time.time() - 3600)
    with history_server(str(tmp_path)) as (url, _):
        ctx, pg, errors = _new_page(browser)
        try:
            pg.goto(f"{url.rstrip('/')}/sessions/{name}/#/overview")
            heading = pg.get_by_test_id("charts-heading")
            heading.wait_for()
            pg.wait_for_function(
                "document.querySelector('[data-testid=charts-heading]').textContent"
                ".startsWith('Recorded session (ended ')"
            )
            pg.get_by_test_id("stat-cpu-now").wait_for()
            body = pg.locator("body").inner_text()
            assert "CPU at the end" in body and "CPU now" not in body
            assert not re.search(r"\blive\b", body, re.IGNORECASE), body
            _shot(pg, "history_overview")
        finally:
            ctx.close()
        assert not errors, errors
