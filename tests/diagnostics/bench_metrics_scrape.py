"""Benchmark (not a test): ``GET /metrics`` on a big cluster's state (issue 4 §5: under
300 ms), with 100 nodes' metrics and workers, 20,000 actors and N tasks entered through the
dashboard's ingestion calls (``node_metrics``, ``set_workers``, ``update_actor``,
``add_task_events``), scraped through the real FastAPI app.

    .venv/bin/python tests/diagnostics/bench_metrics_scrape.py [--tasks N] [--scrapes K]
        [--query compat=ray]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from bench_timeline_export import ingest
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.state import DashboardState
from fastapi.testclient import TestClient


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=1_000_000)
    p.add_argument("--scrapes", type=int, default=50)
    p.add_argument("--query", default="", help="URL parameters, e.g. compat=ray")
    args = p.parse_args()
    state = DashboardState()
    now = time.time()
    for n in range(100):
        nid = f"{n:056x}"
        state.update_node(nid, {"node_ip": f"10.0.{n // 250}.{n % 250}"})
        state.node_metrics(
            nid,
            now,
            {
                "cpu_percent": 10.0,
                "cpu_per_core": [10.0] * 16,
                "num_cpus": 16,
                "load_avg": [1.0, 1.0, 1.0],
                "mem_total_bytes": 6.4e10,
                "mem_used_bytes": 1e10,
                "mem_available_bytes": 5.4e10,
                "mem_shared_bytes": 1e9,
                "disks": [{"mount": "/", "total_bytes": 1e12, "used_bytes": 1e11}],
                "disk_read_bytes_per_s": 1.0,
                "disk_write_bytes_per_s": 1.0,
                "net_sent_bytes_per_s": 1.0,
                "net_recv_bytes_per_s": 1.0,
                "uptime_s": 1e5,
                "object_store_used_bytes": 1e9,
                "object_store_capacity_bytes": 2e10,
                "object_store_objects": 100,
                "agent": {"cpu_percent": 1.0, "rss_bytes": 5e7},
            },
        )
        state.set_workers(
            nid,
            [
                {
                    "pid": 1000 + i,
                    "kind": "worker" if i > 2 else ("raylet", "agent", "gcs_server")[i],
                    "cpu_percent": 5.0,
                    "rss_bytes": 1e8,
                    "uss_bytes": 8e7,
                }
                for i in range(20)
            ],
        )
    for a in range(20_000):
        state.update_actor(
            {
                "actor_id": f"{a:032x}",
                "class_name": f"Actor{a % 50}",
                "state": "ALIVE" if a % 10 else "DEAD",
            }
        )
    t = time.perf_counter()
    ingest(state, args.tasks)
    print(
        f"state: 100 nodes, 20,000 actors, {args.tasks:,} tasks "
        f"(ingested in {time.perf_counter() - t:.1f} s)"
    )
    # As the dashboard server does (server._freeze_gc): the long-lived state is frozen out
    # of the cyclic collector, so a full collection is not a 600 ms pause inside a scrape.
    gc.set_threshold(50_000, 50, 100)
    gc.freeze()
    client = TestClient(create_app(DashboardContext(state=state)).fastapi)
    times = []
    size = 0
    for _ in range(args.scrapes):
        t = time.perf_counter()
        resp = client.get(f"/metrics?{args.query}" if args.query else "/metrics")
        times.append(time.perf_counter() - t)
        resp.raise_for_status()
        size = len(resp.content)
    first = times[0]
    times.sort()
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    print(
        f"/metrics{'?' + args.query if args.query else ''}: {size / 1024:.0f} KiB; median {statistics.median(times) * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms over {args.scrapes} scrapes "
        f"(the first: {first * 1000:.1f} ms)"
    )


if __name__ == "__main__":
    main()
