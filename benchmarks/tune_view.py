"""Issue 30's Tune view target: ``/api/tune/experiments/{name}/trials`` answers in < 100 ms
with 10,000 trials of 100 results each, and the dashboard's memory for that experiment stays
under 200 MB.

Starts a local node (its GCS and dashboard), writes such an experiment straight into the GCS
KV in the publisher's format (``ember.tune.publish``: the same chunks and thinned curves a
driver writes, so no 10,000 actors are needed), waits until the dashboard has read it all,
then times the trials endpoint (the first page as the page asks for it: default order,
sorted by the metric, filtered by status) and the curves of 8 trials, and reads the
dashboard process's RSS before and after.

    .venv/bin/python benchmarks/tune_view.py [--trials 10000] [--results 100] [--repeat 30]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import urllib.request

import ember
import psutil
from ember import global_state
from ember.tune.publish import (
    CHUNK,
    FORMAT,
    NAMESPACE,
    Curve,
    curves_key,
    exp_key,
    trials_key,
)

NAME = "bench_view"


def dashboard_process() -> psutil.Process:
    for p in psutil.Process().children(recursive=True):
        try:
            if "ember.dashboard.server" in " ".join(p.cmdline()):
                return p
        except psutil.Error:
            continue
    raise RuntimeError("no dashboard process among this node's processes")


def put(key: bytes, value: bytes) -> None:
    worker = global_state.require_worker()
    worker.call_gcs_sync(
        "kv_put", {"namespace": NAMESPACE, "key": key, "value": value, "overwrite": True}
    )


def fill(trials: int, results: int) -> float:
    """Writes the experiment; returns the bytes written."""
    rng = random.Random(0)
    written = 0
    chunks = (trials + CHUNK - 1) // CHUNK
    statuses = ["TERMINATED", "RUNNING", "ERROR", "PENDING"]
    for c in range(chunks):
        rows = []
        for i in range(c * CHUNK, min(trials, (c + 1) * CHUNK)):
            tid = f"bench_{i:05d}"
            lr, layers = 10 ** rng.uniform(-5, -1), rng.choice([1, 2, 4, 8])
            curve = Curve()
            best = {"loss": float("inf"), "acc": 0.0}
            last: dict = {}
            for it in range(1, results + 1):
                last = {"loss": lr * 1000 / it + rng.random() * 0.01, "acc": it / results}
                best = {
                    "loss": min(best["loss"], last["loss"]),
                    "acc": max(best["acc"], last["acc"]),
                }
                curve.add({**last, "training_iteration": it, "time_total_s": it * 0.1})
            status = statuses[i % 4] if i % 50 == 0 else "TERMINATED"
            rows.append(
                {
                    "trial_id": tid,
                    "trial_name": f"train_{tid}",
                    "status": status,
                    "config": {"lr": lr, "net": {"layers": layers}, "opt": "adam"},
                    "metrics": {
                        m: {
                            "last": last[m],
                            "min": min(best[m], last[m]),
                            "max": max(best[m], last[m]),
                        }
                        for m in last
                    },
                    "iterations": results,
                    "time_total_s": results * 0.1,
                    "start_time": time.time(),
                    "actor_name": f"tune/{NAME}/train_{tid}",
                    "actor_id": "",
                    "num_failures": 1 if status == "ERROR" else 0,
                    "error": "Traceback (most recent call last):\n  ...\nValueError: x"
                    if status == "ERROR"
                    else None,
                    "stop_reason": None,
                    "logdir": f"/tmp/{NAME}/train_{tid}",
                }
            )
            blob = json.dumps(curve.to_json()).encode()
            written += len(blob)
            put(curves_key(NAME, tid), blob)
        blob = json.dumps(rows).encode()
        written += len(blob)
        put(trials_key(NAME, c), blob)
    record = {
        "format": FORMAT,
        "name": NAME,
        "path": f"/tmp/{NAME}",
        "metric": "loss",
        "mode": "min",
        "job_id": "",
        "space": {"lr": "loguniform(1e-05, 0.1)", "net/layers": "choice([1, 2, 4, 8])"},
        "chunk_size": CHUNK,
        "status": "RUNNING",
        "stop_reason": "",
        "start_time": time.time(),
        "end_time": None,
        "updated": time.time(),
        "num_trials": trials,
        "status_counts": {},
        "chunks": [1] * chunks,
    }
    put(exp_key(NAME), json.dumps(record).encode())
    return written


def get(url: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as r:
        body = json.loads(r.read())
    return (time.perf_counter() - t0) * 1000, body


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--results", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    ctx = ember.init(num_cpus=1)
    url = ctx.dashboard_url.rstrip("/")
    if not url.startswith("http"):
        url = f"http://{url}"
    dash = dashboard_process()
    time.sleep(2)
    rss_before = dash.memory_info().rss
    t0 = time.perf_counter()
    written = fill(args.trials, args.results)
    fill_s = time.perf_counter() - t0
    base = f"{url}/api/tune/experiments/{NAME}"
    deadline = time.monotonic() + 120

    def loaded() -> bool:
        try:
            return get(f"{base}/trials?limit=1")[1]["total"] == args.trials
        except Exception:  # noqa: BLE001 - not read yet (404)
            return False

    while not loaded():
        if time.monotonic() > deadline:
            raise SystemExit("the dashboard did not read the experiment within 120 s")
        time.sleep(0.2)
    read_s = time.perf_counter() - t0 - fill_s
    time.sleep(2)  # a few more polls: what stays in memory, not a transient
    rss_after = dash.memory_info().rss
    queries = {
        "first page (100 rows)": f"{base}/trials?limit=100",
        "sorted by last/loss": f"{base}/trials?limit=100&sort_by=last/loss",
        "filter status=RUNNING": f"{base}/trials?limit=100&filter=status%3DRUNNING",
        "columns + sort by config/lr desc": f"{base}/trials?limit=100&sort_by=config/lr&descending=true&columns=status,config/lr,last/loss",
        "curves of 8 trials": f"{base}/curves?"
        + "&".join(f"trial=bench_{i:05d}" for i in range(0, 8000, 1000)),
    }
    print(
        f"experiment: {args.trials:,} trials x {args.results} results, {written / 2**20:.1f} MiB of JSON in the KV"
    )
    print(f"written in {fill_s:.1f} s; read by the dashboard {read_s:.1f} s later")
    print(
        f"dashboard RSS: {rss_before / 2**20:.0f} MiB before, {rss_after / 2**20:.0f} MiB after "
        f"(+{(rss_after - rss_before) / 2**20:.0f} MiB for the experiment)"
    )
    print(f"{'query':40} {'median ms':>10} {'p95 ms':>8}")
    for label, q in queries.items():
        get(q)  # warm
        times = sorted(get(q)[0] for _ in range(args.repeat))
        p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
        print(f"{label:40} {statistics.median(times):10.1f} {p95:8.1f}")
    ember.shutdown()


if __name__ == "__main__":
    main()
