"""The Tune view end to end: a cluster head (``ember start --head``, 4 CPUs) runs an ASHA
experiment as a submitted job; the dashboard's ``/api/tune`` answers what a user reads (the
running trial's status, its exact config, last and best metric values, as the trial's own
files say them), the failed trial's traceback, curves; a trial is stopped from the API and
one with ``ember tune stop``, then the whole experiment; ``ember tune ls``/``lsx`` read the
experiment directory; and after ``ember stop`` the history dashboard still shows it all.

The tests run in order on one cluster and one experiment (module-scoped)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from ember_test_utils import (
    api_get,
    dashboard_url_in,
    ember_cli,
    head_cluster,
    history_server,
    wait_until,
)

EXP = "viewexp"
FAIL_LR = 0.5
DRIVER = """
import time
import ember
from ember import tune
from ember.tune.schedulers import ASHAScheduler

ember.init()

def train(config):
    for i in range(1, 2001):
        if config["lr"] == {fail} and i == 3:
            raise ValueError("tune-view-boom")
        time.sleep(0.2)
        tune.report({{"loss": config["lr"] * 100 / i + i * 0.001, "acc": i / 2000}})

tuner = tune.Tuner(
    train,
    param_space={{"lr": tune.grid_search([0.001, 0.01, 0.1, {fail}]), "net": {{"layers": 2}}}},
    tune_config=tune.TuneConfig(
        metric="loss", mode="min", scheduler=ASHAScheduler(max_t=2000, grace_period=2000)
    ),
    run_config=tune.RunConfig(name="{exp}", storage_path={storage!r}, verbose=0),
)
grid = tuner.fit()
print("FIT-DONE", len(grid), flush=True)
"""


@pytest.fixture(scope="module")
def cluster():
    with head_cluster("--num-cpus", "4", prefix="emb-tunev-") as (root, _port, head):
        url = dashboard_url_in(head.stdout)
        storage = os.path.join(root, "results")
        script = os.path.join(root, "driver.py")
        with open(script, "w") as f:
            f.write(DRIVER.format(fail=FAIL_LR, exp=EXP, storage=storage))
        http = httpx.Client(base_url=url, timeout=30)
        r = http.post("/api/jobs/", json={"entrypoint": f"{sys.executable} {script}"})
        assert r.status_code == 200, r.text
        yield {"root": root, "url": url, "http": http, "storage": storage, "job": r.json()}
        http.close()


def trials(http: httpx.Client, **params) -> dict:
    return api_get(http, f"/api/tune/experiments/{EXP}/trials", **params)


def results_of(logdir: str) -> list[dict]:
    return [json.loads(line) for line in Path(logdir, "result.json").read_text().splitlines()]


def running(http: httpx.Client, least_iterations: int) -> list[dict]:
    try:
        rows = trials(http, filter="status=RUNNING")["items"]
    except AssertionError:  # no experiment published yet (404)
        return []
    return [r for r in rows if (r.get("iterations") or 0) >= least_iterations]


def test_the_running_trials_config_and_metrics_are_the_trials_own(cluster):
    http = cluster["http"]
    rows = wait_until(
        lambda: len(running(http, 3)) == 3 and running(http, 3), 120, 0.5, "3 trials running"
    )
    exps = api_get(http, "/api/tune/experiments")["experiments"]
    exp = next(e for e in exps if e["name"] == EXP)
    assert exp["status"] == "RUNNING" and exp["metric"] == "loss" and exp["mode"] == "min"
    assert exp["path"] == os.path.join(cluster["storage"], EXP)
    assert exp["num_trials"] == 4 and exp["job_id"]
    assert exp["space"] == {"lr": "grid_search([0.001, 0.01, 0.1, 0.5])", "net/layers": "2"}
    row = rows[0]
    # The exact config: what the trial's params.json says.
    params = json.loads(Path(row["logdir"], "params.json").read_text())
    assert {k: v for k, v in row.items() if k.startswith("config/")} == {
        "config/lr": params["lr"],
        "config/net/layers": 2,
    }
    # Last and best: the trial's result.json, at the iteration the row reports.
    lines = results_of(row["logdir"])
    n = row["iterations"]
    assert len(lines) >= n
    assert row["last/loss"] == lines[n - 1]["loss"]
    assert row["best/loss"] == min(line["loss"] for line in lines[:n])
    assert row["last/acc"] == n / 2000
    # acc is not the experiment's metric: its range, not a "best".
    assert (row["min/acc"], row["max/acc"]) == (1 / 2000, n / 2000) and "best/acc" not in row
    assert row["time_total_s"] == lines[n - 1]["time_total_s"]
    # Where it runs: its actor, named after the trial, and that actor's node.
    actor = api_get(http, f"/api/actors/{row['actor_id']}")
    assert actor["name"] == f"tune/{EXP}/{row['trial_name']}"
    assert row["node_id"] == actor["node_id"] and row["pid"] == actor["pid"]


def test_the_failed_trial_shows_its_traceback(cluster):
    http = cluster["http"]
    page = wait_until(
        lambda: (p := trials(http, filter="status=ERROR"))["total"] == 1 and p, 60, 0.5, "ERROR"
    )
    row = page["items"][0]
    assert row["config/lr"] == FAIL_LR
    assert "Traceback" in row["error"] and "ValueError: tune-view-boom" in row["error"]
    assert row["iterations"] == 2


def test_sort_columns_paging_and_the_best_trial(cluster):
    http = cluster["http"]
    page = trials(http, sort_by="config/lr", descending=True, columns="status,config/lr")
    assert [r["config/lr"] for r in page["items"]] == [0.5, 0.1, 0.01, 0.001]
    assert set(page["items"][0]) == {"trial_id", "status", "config/lr"}
    assert page["metric"] == "loss" and page["mode"] == "min"
    # The best trial by its last loss among the trials (lr 0.001 has the lowest loss).
    best = next(r for r in trials(http)["items"] if r["trial_id"] == page["best_trial_id"])
    assert best["config/lr"] == 0.001
    assert (
        trials(http, limit=2, offset=1)["items"][0]["trial_id"]
        == trials(http)["items"][1]["trial_id"]
    )
    bad = http.get(f"/api/tune/experiments/{EXP}/trials", params={"columns": "nope"})
    assert bad.status_code == 422 and "nope" in bad.text
    missing = http.get("/api/tune/experiments/nope/trials")
    assert missing.status_code == 404 and EXP in missing.text


def test_curves_are_the_trials_results_and_grow(cluster):
    http = cluster["http"]
    row = running(http, 3)[0]
    first = api_get(http, f"/api/tune/experiments/{EXP}/curves", trial=row["trial_id"])
    curve = first["curves"][row["trial_id"]]
    lines = results_of(row["logdir"])
    assert set(curve["metrics"]) == {"loss", "acc"}
    for i, it in enumerate(curve["iter"]):
        assert curve["metrics"]["loss"][i] == lines[it - 1]["loss"]

    def grew():
        again = api_get(http, f"/api/tune/experiments/{EXP}/curves", trial=row["trial_id"])
        return again["curves"][row["trial_id"]]["iter"][-1] > curve["iter"][-1]

    wait_until(grew, 30, 0.5, "the curve to grow")


def test_stop_one_trial_from_the_api_and_one_with_the_cli(cluster):
    http = cluster["http"]
    rows = sorted(running(http, 1), key=lambda r: r["config/lr"])
    assert len(rows) == 3, rows
    by_api, by_cli = rows[1], rows[2]
    r = http.post(
        f"/api/tune/experiments/{EXP}/trials/{by_api['trial_id']}/stop",
        json={"reason": "enough of lr 0.01"},
    )
    assert r.status_code == 200, r.text
    cli = subprocess.run(
        [
            ember_cli(),
            "tune",
            "stop",
            EXP,
            "--trial",
            by_cli["trial_id"],
            "--address",
            cluster["url"],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert f"asked to stop trial {by_cli['trial_id']} of experiment {EXP}" in cli.stdout

    def stopped(trial_id):
        row = next(x for x in trials(http)["items"] if x["trial_id"] == trial_id)
        return row if row["status"] == "TERMINATED" else None

    a = wait_until(lambda: stopped(by_api["trial_id"]), 30, 0.5, "the API's stop")
    b = wait_until(lambda: stopped(by_cli["trial_id"]), 30, 0.5, "the CLI's stop")
    assert a["stop_reason"] == "enough of lr 0.01"
    assert b["stop_reason"] == "stopped with `ember tune stop`"
    assert a["iterations"] < 2000 and b["iterations"] < 2000
    # A finished trial cannot be stopped again: said, not ignored.
    again = http.post(f"/api/tune/experiments/{EXP}/trials/{by_api['trial_id']}/stop")
    assert again.status_code == 409 and "TERMINATED" in again.text


def test_stop_the_experiment(cluster):
    http = cluster["http"]
    r = http.post(f"/api/tune/experiments/{EXP}/stop", json={"reason": "the test is over"})
    assert r.status_code == 200, r.text

    def ended():
        exp = next(
            e for e in api_get(http, "/api/tune/experiments")["experiments"] if e["name"] == EXP
        )
        return exp if exp["status"] != "RUNNING" else None

    exp = wait_until(ended, 30, 0.5, "the experiment to stop")
    assert exp["status"] == "STOPPED" and exp["stop_reason"] == "the test is over"
    assert exp["end_time"] >= exp["start_time"]
    statuses = {r["config/lr"]: r["status"] for r in trials(http)["items"]}
    assert statuses == {0.001: "TERMINATED", 0.01: "TERMINATED", 0.1: "TERMINATED", 0.5: "ERROR"}
    last = next(r for r in trials(http)["items"] if r["config/lr"] == 0.001)
    assert last["stop_reason"] == "the test is over"
    sid = cluster["job"]["submission_id"]
    job = wait_until(
        lambda: (j := api_get(http, f"/api/jobs/{sid}"))["status"] != "RUNNING" and j,
        60,
        0.5,
        "the driver to end",
    )
    assert job["status"] == "SUCCEEDED", job
    logs = api_get(http, f"/api/jobs/{sid}/logs")["logs"]
    assert "FIT-DONE 4" in logs and "stopped at the user's request: the test is over" in logs


def test_tune_ls_and_lsx_read_the_experiment_dir(cluster, tmp_path):
    exp_dir = os.path.join(cluster["storage"], EXP)
    out = tmp_path / "trials.csv"
    ls = subprocess.run(
        [ember_cli(), "tune", "ls", exp_dir, "--sort", "config/lr", "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert ls.returncode == 0, ls.stderr
    header = ls.stdout.splitlines()[1]
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols[:4] == ["trainable_name", "experiment_tag", "trial_id", "status"], cols
    assert "config/lr" in cols and "config/net/layers" in cols
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [float(r["config/lr"]) for r in rows] == [0.001, 0.01, 0.1, 0.5]
    assert [r["status"] for r in rows] == ["TERMINATED", "TERMINATED", "TERMINATED", "ERROR"]
    assert rows[3]["training_iteration"] == "2"
    filtered = subprocess.run(
        [
            ember_cli(),
            "tune",
            "ls",
            exp_dir,
            "--filter",
            "status == ERROR",
            "--columns",
            "trial_id,status",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert filtered.returncode == 0, filtered.stderr
    body = [
        line
        for line in filtered.stdout.splitlines()
        if line.startswith("| ") and "trial_id" not in line
    ]
    assert len(body) == 1 and "ERROR" in body[0], filtered.stdout
    bad = subprocess.run(
        [ember_cli(), "tune", "ls", exp_dir, "--filter", "status ~ x"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "<column> <operator> <value>" in bad.stderr
    lsx = subprocess.run(
        [ember_cli(), "tune", "lsx", cluster["storage"]], capture_output=True, text=True, timeout=60
    )
    assert lsx.returncode == 0, lsx.stderr
    row = next(line for line in lsx.stdout.splitlines() if f" {EXP} " in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:5] == [EXP, "4", "0", "3", "1"], cells


def test_the_history_dashboard_keeps_the_experiment(cluster):
    http = cluster["http"]
    before = trials(http)["items"]
    stopped = subprocess.run(
        [ember_cli(), "stop", "--temp-dir", cluster["root"]],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert stopped.returncode == 0, stopped.stderr
    with history_server(cluster["root"]) as (url, _):
        h = httpx.Client(base_url=url, timeout=30)
        exp = next(
            e for e in api_get(h, "/api/tune/experiments")["experiments"] if e["name"] == EXP
        )
        assert exp["status"] == "STOPPED" and exp["num_trials"] == 4
        after = api_get(h, f"/api/tune/experiments/{EXP}/trials")["items"]
        key = lambda r: r["trial_id"]  # noqa: E731
        assert [
            {k: v for k, v in r.items() if k not in ("node_id", "pid")}
            for r in sorted(after, key=key)
        ] == [
            {k: v for k, v in r.items() if k not in ("node_id", "pid")}
            for r in sorted(before, key=key)
        ]
        best = exp["best_trial_id"]
        curves = api_get(h, f"/api/tune/experiments/{EXP}/curves", trial=best)["curves"][best]
        assert curves["iter"][-1] == next(r for r in after if r["trial_id"] == best)["iterations"]
        refused = h.post(f"/api/tune/experiments/{EXP}/stop")
        assert refused.status_code == 405 and "history" in refused.text
        h.close()
