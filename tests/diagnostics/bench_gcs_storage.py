"""Benchmark (not a test): what durable GCS storage costs actor creation, in the GCS alone.

A GCS (``GcsServer``) over fake raylets and workers (``tests/gcs_fakes.py``) creates actors,
anonymous and named, each answered only once its record is durable, with the tables in
memory, in SQLite (WAL, the default) and in Redis. Two shapes: one request at a time (each
its own write: the worst case) and bursts of 100 requests read in one loop turn (one write).
The end-to-end rows (worker start included) are the microbenchmark's ``actor creation`` and
``named actor creation and get_actor`` (``ember microbenchmark --extra --filter actor``).

    .venv/bin/python tests/diagnostics/bench_gcs_storage.py [--actors N] [--redis URL]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ember.gcs.storage import Store, default_url, open_backend  # noqa: E402
from gcs_fakes import FakeConn, add_node, make_gcs, settle, spec  # noqa: E402


async def _create(gcs, conn, specs) -> None:
    replies = [gcs.handlers["create_actor"](conn, s) for s in specs]
    for r in replies:
        if inspect.isawaitable(r):
            await r


async def measure(url: str, n: int, named: bool, burst: int) -> tuple[float, float]:
    """Actors created per second, and the GCS's CPU time per actor in µs (steadier than the
    rate on a busy machine; Redis's own CPU is not in it)."""
    store = Store(open_backend(url, namespace=f"bench-{time.time_ns()}"))
    gcs, _, _ = make_gcs(store)
    add_node(gcs, cpus=10**9)
    await settle()
    conn = FakeConn()
    specs = [
        spec(resources={}, **({"name": f"a{i}", "namespace": "ns"} if named else {}))
        for i in range(n)
    ]
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(0, n, burst):
        await _create(gcs, conn, specs[i : i + burst])
    await store.flush_now()
    took, cpu = time.perf_counter() - start, time.process_time() - cpu
    await settle()
    await store.close()
    return n / took, cpu / n * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--actors", type=int, default=2000)
    p.add_argument("--redis", default="", help="redis://HOST:PORT (a server of your own)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        backends = {"memory": "memory:", "sqlite": default_url(tmp)}
        if args.redis:
            backends["redis"] = args.redis
        print(f"{'':15} {'1 at a time':>22} {'100 per turn':>22}")
        print(
            f"{'storage  kind':15} {'actors/s':>11} {'CPU µs':>10} {'actors/s':>11} {'CPU µs':>10}"
        )
        for label, url in backends.items():
            for named in (False, True):
                one, one_cpu = asyncio.run(measure(url, args.actors, named, 1))
                many, many_cpu = asyncio.run(measure(url, args.actors, named, 100))
                kind = "named" if named else "anon"
                print(
                    f"{label:8} {kind:6} {one:11,.0f} {one_cpu:10,.0f} {many:11,.0f} "
                    f"{many_cpu:10,.0f}"
                )


if __name__ == "__main__":
    main()
