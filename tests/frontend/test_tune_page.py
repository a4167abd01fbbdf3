"""The Tune page in headless Chromium on a real cluster head running an ASHA experiment (a
submitted job): the experiment reads RUNNING; its trials table shows each trial's config; the
best trial is marked (the one the API names); the live curves grow between two reads; the
failed trial's traceback opens under its row; parallel coordinates draw a line per trial; a
trial's Stop button ends it TERMINATED with the reason on its row; and "Stop experiment" stops
the rest, the page then reading STOPPED with the reason."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from typing import Any

import ember
import httpx
import pytest
from browser_utils import ARTIFACTS, checked_page, open_page
from ember_test_utils import ember_cli, head_cluster, history_server, wait_until

pytestmark = pytest.mark.timeout(180)

EXP = "pageexp"
PROGRAM = textwrap.dedent(
    """
    import sys, time
    import ember
    from ember import tune
    from ember.tune.schedulers import ASHAScheduler

    ember.init()

    def train(config):
        for i in range(1, 3001):
            if config["lr"] == 0.3 and i == 2:
                raise ValueError("tune-page-boom")
            time.sleep(0.2)
            tune.report({"loss": config["lr"] / i, "acc": i / 3000})

    tune.Tuner(
        train,
        param_space={"lr": tune.grid_search([0.01, 0.1, 0.3]), "width": tune.choice([8])},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", scheduler=ASHAScheduler(max_t=3000, grace_period=3000)
        ),
        run_config=tune.RunConfig(name="pageexp", storage_path=sys.argv[1], verbose=0),
    ).fit()
    """
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A cluster head running the experiment as a job; overrides conftest's local node."""
    if ember.is_initialized():
        ember.shutdown()
    with head_cluster("--num-cpus", "3", "--dashboard-port", "0", prefix="emb-tunep-") as (
        root,
        _port,
        started,
    ):
        url = re.search(r"Dashboard: (http://[0-9.:]+)", started.stdout).group(1).rstrip("/")
        program = tmp_path_factory.mktemp("tune") / "exp.py"
        program.write_text(PROGRAM)
        http = httpx.Client(base_url=url, timeout=30)
        entry = f"{sys.executable} {program} {root}/results"
        r = http.post("/api/jobs/", json={"entrypoint": entry})
        assert r.status_code == 200, r.text
        try:
            yield url, http, root
        finally:
            try:  # a test that failed half-way leaves no experiment running
                http.post(f"/api/jobs/{r.json()['submission_id']}/stop")
            except httpx.HTTPError:
                pass  # the history test stopped the cluster already
            http.close()


def _trials(http: httpx.Client) -> dict:
    r = http.get(f"/api/tune/experiments/{EXP}/trials")
    return r.json() if r.status_code == 200 else {"items": [], "best_trial_id": None}


def test_the_tune_page_of_a_running_asha_experiment(page, cluster):
    url, http, _root = cluster

    def ready():
        t = _trials(http)
        statuses = sorted(r["status"] for r in t["items"])
        live = [r for r in t["items"] if r["status"] == "RUNNING" and r["iterations"] >= 3]
        return t if statuses == ["ERROR", "RUNNING", "RUNNING"] and len(live) == 2 else None

    api = wait_until(ready, 120, 0.5, "two trials running and one failed")
    open_page(page, url, f"tune?exp={EXP}")
    row = page.locator(f"[data-testid=tune-experiment][data-name={EXP}]")
    row.wait_for()
    assert row.get_attribute("data-status") == "RUNNING"
    assert "loss (min)" in row.inner_text()

    # Every trial, with its config; the best one marked, as the API names it.
    trials = page.locator("[data-testid=tune-trial]")
    wait_until(lambda: trials.count() == 3, 20, 0.2, "3 trial rows")
    best = page.locator("[data-testid=tune-trial][data-best='1']")
    wait_until(lambda: best.count() == 1, 20, 0.2, "the best trial marked")
    assert best.get_attribute("data-trial") == api["best_trial_id"]
    assert "★ best" in best.inner_text()
    assert best.locator("td[data-col='config/lr']").inner_text() == "0.01"

    # Live curves: the chart holds more points on a later read.
    chart = page.locator("[data-testid=tune-chart]")
    chart.wait_for()
    first = int(chart.get_attribute("data-points"))
    assert first >= 3
    wait_until(
        lambda: int(chart.get_attribute("data-points")) > first, 30, 0.3, "the curves to grow"
    )

    # The failed trial's traceback, under its row.
    failed = page.locator("[data-testid=tune-trial][data-status=ERROR]")
    failed.locator("[data-testid=tune-error] summary").click()
    tb = failed.locator("[data-testid=tune-traceback]")
    tb.wait_for()
    assert "Traceback (most recent call last)" in tb.inner_text()
    assert "ValueError: tune-page-boom" in tb.inner_text()

    # A line per trial across the hyperparameters and the metric.
    coords = page.locator("[data-testid=tune-pcoords]")
    assert coords.get_attribute("data-lines") == "3"

    # Links: the trial's actor, its node.
    running = page.locator("[data-testid=tune-trial][data-status=RUNNING]").first
    actor_link = running.locator("[data-testid=actor-link]")
    assert "#/actors?sel=" in actor_link.get_attribute("href")
    assert running.locator("[data-testid=node-link]").count() == 1

    # Stop one trial from its row: it reads TERMINATED with the reason, the other runs on.
    target = page.locator("[data-testid=tune-trial][data-status=RUNNING]").last
    target_id = target.get_attribute("data-trial")
    target.get_by_test_id("tune-stop-trial").click()
    stopped = page.locator(f"[data-testid=tune-trial][data-trial='{target_id}']")
    wait_until(
        lambda: stopped.get_attribute("data-status") == "TERMINATED", 30, 0.3, "the trial's stop"
    )
    assert "stopped from the dashboard" in stopped.locator("td[data-col=status]").inner_text()
    assert page.locator("[data-testid=tune-trial][data-status=RUNNING]").count() == 1

    # Stop the experiment from the page: it ends STOPPED, its trials TERMINATED.
    page.get_by_test_id("tune-stop-experiment").click()
    page.get_by_test_id("tune-action").wait_for()
    wait_until(
        lambda: row.get_attribute("data-status") == "STOPPED", 40, 0.3, "the experiment to stop"
    )
    assert "stopped from the dashboard" in row.inner_text()
    statuses = sorted(r["status"] for r in _trials(http)["items"])
    assert statuses == ["ERROR", "TERMINATED", "TERMINATED"]


def test_the_tune_page_in_the_history_after_the_cluster_stopped(browser, cluster):
    """After ``ember stop``, ``ember dashboard --history`` shows the same experiment: its
    trials, the best one marked, the traceback, and no stop buttons."""
    _url, http, root = cluster
    before = {r["trial_id"]: r["status"] for r in _trials(http)["items"]}
    assert sorted(before.values()) == ["ERROR", "TERMINATED", "TERMINATED"]
    stop = subprocess.run(
        [ember_cli(), "stop", "--temp-dir", root], capture_output=True, text=True, timeout=90
    )
    assert stop.returncode == 0, stop.stderr
    with history_server(root) as (url, _):
        with checked_page(browser) as page:
            _history_checks(page, url, before)


def _history_checks(page: Any, url: str, before: dict[str, str]) -> None:
    page.goto(f"{url.rstrip('/')}/#/tune?exp={EXP}")
    row = page.locator(f"[data-testid=tune-experiment][data-name={EXP}]")
    row.wait_for()
    assert row.get_attribute("data-status") == "STOPPED"
    trials = page.locator("[data-testid=tune-trial]")
    wait_until(lambda: trials.count() == 3, 20, 0.2, "3 trial rows")
    shown = {
        trials.nth(i).get_attribute("data-trial"): trials.nth(i).get_attribute("data-status")
        for i in range(3)
    }
    assert shown == before
    assert page.locator("[data-testid=tune-trial][data-best='1']").count() == 1
    failed = page.locator("[data-testid=tune-trial][data-status=ERROR]")
    failed.locator("[data-testid=tune-error] summary").click()
    assert "ValueError: tune-page-boom" in failed.get_by_test_id("tune-traceback").inner_text()
    assert page.get_by_test_id("tune-chart").get_attribute("data-points") != "0"
    assert page.get_by_test_id("tune-stop-experiment").count() == 0
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "tune_history.png"))
