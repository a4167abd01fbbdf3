"""Benchmark (not a test): a 1,000,000-task timeline exported from the dashboard (issue 4 §5:
under 60 s with flat memory).

The tasks enter through the dashboard's real ingestion path (``DashboardState.
add_task_events``, what the agent hub calls for each batch), three events each, with parents
and object arguments; then ``GET /api/timeline`` streams the trace through the real FastAPI
app into a file while a thread samples the process's resident memory.

    .venv/bin/python tests/diagnostics/bench_timeline_export.py [--tasks N] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

import psutil
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.state import DashboardState
from fastapi.testclient import TestClient


def ingest(state: DashboardState, n: int, batch: int = 5_000) -> None:
    t0 = time.time() - n * 1e-4
    for lo in range(0, n, batch):
        events = []
        for i in range(lo, min(lo + batch, n)):
            tid = f"{i:032x}"
            t = t0 + i * 1e-4
            extra = {
                "function": f"bench.f{i % 7}",
                "pid": 1000 + i % 32,
                "node_id": f"{i % 4:056x}",
                "timings": {
                    "start": t + 2e-5,
                    "args_ready": t + 3e-5,
                    "executed": t + 8e-5,
                    "end": t + 9e-5,
                },
                "parent": f"{i - 1:032x}" if i else "",
                "owner_pid": 999,
                "arg_tasks": [f"{i - 1:032x}"] if i else [],
            }
            events.append([tid, "PENDING_ARGS_AVAIL", t, 0, None])
            events.append([tid, "SUBMITTED_TO_WORKER", t + 1e-5, 0, {"worker_id": "ab"}])
            events.append([tid, "FINISHED", t + 9e-5, 0, extra])
        state.add_task_events(f"{0:056x}", "01000000", events)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=1_000_000)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    proc = psutil.Process()
    state = DashboardState()
    t = time.perf_counter()
    ingest(state, args.tasks)
    print(
        f"ingested {args.tasks:,} tasks in {time.perf_counter() - t:.1f} s; "
        f"RSS {proc.memory_info().rss / 2**20:.0f} MiB"
    )
    client = TestClient(create_app(DashboardContext(state=state)).fastapi)
    peak = [proc.memory_info().rss]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            peak[0] = max(peak[0], proc.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    before = proc.memory_info().rss
    sampler.start()
    out = args.out or os.path.join(tempfile.mkdtemp(prefix="ember-bench-"), "timeline.json")
    t = time.perf_counter()
    size = 0
    with client.stream("GET", "/api/timeline") as resp, open(out, "wb") as f:
        resp.raise_for_status()
        for chunk in resp.iter_bytes():
            f.write(chunk)
            size += len(chunk)
    elapsed = time.perf_counter() - t
    done.set()
    sampler.join()
    print(
        f"exported {args.tasks:,} tasks in {elapsed:.1f} s ({size / 2**20:.0f} MiB to {out}); "
        f"RSS before {before / 2**20:.0f} MiB, peak during export {peak[0] / 2**20:.0f} MiB "
        f"(+{(peak[0] - before) / 2**20:.0f} MiB)"
    )


if __name__ == "__main__":
    main()
