"""Issue 4 §5: the dashboard with 20,000 actors, 1,000,000 tasks and 100 nodes' metrics.

State goes in through the agents' real ingestion path: this script opens one gRPC stream per
simulated node to a real dashboard process (``ember.dashboard.server``) and sends what an
agent sends (hello, metrics with workers and log index every 2 s, task-event batches of
5,000, actor rows). Then, while metrics keep streaming:

- 20 concurrent HTTP clients page ``/api/actors?limit=100`` and ``/api/tasks?limit=100``
  (plus filtered and summary variants);
- 20 concurrent clients scrape ``/metrics`` (100 nodes' series);
- one client downloads the whole ``/api/timeline`` (every task) into a file, while the
  dashboard's RSS is sampled every 0.2 s (the export must stream in flat memory).

    .venv/bin/python benchmarks/dashboard_scale.py [--tasks N] [--actors N] [--nodes N]
        [--clients 20] [--requests 50] [--metrics-requests 10] [--json out.json]

The dashboard's RSS is sampled every 0.2 s for the whole run and reported per phase
(``dashboard_rss_mb_sampled``: ingest, lists, metrics, timeline) with the kernel's
high-water mark (``dashboard_rss_mb_hwm``, VmHWM): the peak comes during the ingestion burst,
which a reading taken after it misses. ``dashboard_rss_mb`` is the earlier figure (after
ingestion, under the loads, during the export).

Targets (issue 4 §5): p99 < 100 ms for the two list endpoints, < 300 ms for ``/metrics``; the
1,000,000-task timeline in < 60 s with flat memory; the dashboard under 500 MB throughout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import grpc
import httpx
import psutil
from ember.agent import wire
from ember.cli.timeline import trace_info

FUNCTIONS = [f"module.func_{i}" for i in range(50)]


def start_dashboard(session_dir: str) -> tuple[subprocess.Popen, str, str]:
    os.makedirs(os.path.join(session_dir, "logs"), exist_ok=True)
    r, w = os.pipe()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ember.dashboard.server",
            "--session-dir",
            session_dir,
            "--port",
            "0",
            "--ready-fd",
            str(w),
        ],
        pass_fds=(w,),
        # The server's own capacity is measured: at its default nice 19 it would measure
        # whatever else this shared machine runs (a dedicated head sets it to 0 too).
        env={**os.environ, "EMBER_DASHBOARD_NICE": "0"},
    )
    os.close(w)
    with os.fdopen(r) as f:
        line = f.readline().split()
    if len(line) != 2:
        proc.kill()
        raise SystemExit("the dashboard did not start; see " + session_dir + "/logs")
    return proc, line[0], line[1]


class FakeAgent:
    """One simulated node's agent: the real wire protocol over a real gRPC stream."""

    def __init__(self, address: str, index: int) -> None:
        self.address = address
        self.node_id = f"{index:08x}" + os.urandom(12).hex()
        self.index = index
        self.queue: asyncio.Queue = asyncio.Queue()
        self.sent = 0

    def metrics(self) -> dict:
        workers = [
            {
                "pid": 10_000 * (self.index + 1) + k,
                "worker_id": os.urandom(8).hex(),
                "kind": "worker",
                "state": "IDLE",
                "cpu_percent": random.random() * 100,
                "rss_bytes": 50_000_000,
            }
            for k in range(4)
        ]
        return {
            "type": "metrics",
            "time": time.time(),
            "info": {
                "node_ip": f"10.0.{self.index // 250}.{self.index % 250}",
                "hostname": f"node{self.index}",
                "is_head": self.index == 0,
            },
            "sample": {
                "cpu_percent": random.random() * 100,
                "mem_used_bytes": 4 << 30,
                "mem_total_bytes": 16 << 30,
                "num_workers": 4,
                "cpu_per_core": [random.random() * 100 for _ in range(8)],
            },
            "workers": workers,
            "logs": [
                {
                    "name": "raylet.log",
                    "component": "raylet",
                    "pid": None,
                    "worker_id": None,
                    "size": 1000,
                    "mtime": time.time(),
                    "stream": "log",
                }
            ],
        }

    async def run(self, stop: asyncio.Event) -> None:
        async with grpc.aio.insecure_channel(self.address, options=wire.CHANNEL_OPTIONS) as ch:
            call = ch.stream_stream(wire.METHOD)()
            await call.write(
                wire.encode(
                    {"type": "hello", "node_id": self.node_id, "info": {"node_ip": "10.0.0.1"}}
                )
            )

            async def metrics() -> None:
                # Real agents start at different times: spread the 2 s ticks.
                await asyncio.sleep(random.random() * 2.0)
                while True:
                    self.queue.put_nowait(wire.encode(self.metrics()))
                    await asyncio.sleep(2.0)

            ticker = asyncio.ensure_future(metrics())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                while True:
                    get = asyncio.ensure_future(self.queue.get())
                    await asyncio.wait({get, stopper}, return_when=asyncio.FIRST_COMPLETED)
                    if not get.done():
                        get.cancel()
                        break
                    await call.write(get.result())
                    self.sent += 1
            finally:
                ticker.cancel()
            await call.done_writing()


def task_batches(n_tasks: int, batch: int = 2_500):
    """Batches of 5,000 events: PENDING then FINISHED (1% FAILED) for ``batch`` tasks."""
    t0 = time.time() - n_tasks * 0.001
    for start in range(0, n_tasks, batch):
        events = []
        for i in range(start, min(start + batch, n_tasks)):
            tid = f"{i:024x}" + "00000000"
            fn = FUNCTIONS[i % len(FUNCTIONS)]
            t = t0 + i * 0.001
            events.append([tid, "PENDING_ARGS_AVAIL", t, 0, {"name": fn}])
            failed = i % 100 == 0
            events.append(
                [
                    tid,
                    "FAILED" if failed else "FINISHED",
                    t + 0.01,
                    0,
                    {
                        "timings": {"start": t + 0.002, "end": t + 0.009},
                        "pid": 4242,
                        "error": "ValueError: injected" if failed else None,
                    },
                ]
            )
        yield wire.encode(
            {"type": "task_events", "job_id": "01000000", "events": events, "dropped": 0}
        )


def actor_batches(n_actors: int, batch: int = 1_000, fanout: int = 0):
    """Actor rows in batches; with ``fanout``, actor i was created by actor (i - 1) // fanout
    (through its worker), so the creator tree has that many children per actor."""
    for start in range(0, n_actors, batch):
        rows = [
            {
                "actor_id": f"{i:032x}",
                "class_name": f"Actor{i % 20}",
                "name": "",
                "state": "ALIVE" if i % 10 else "DEAD",
                "pid": 20_000 + i,
                "node_id": None,
                "resources": {"CPU": 1.0},
                **(
                    {
                        "worker_id": f"w{i}",
                        "owner_worker_id": f"w{(i - 1) // fanout}" if i else None,
                    }
                    if fanout
                    else {}
                ),
            }
            for i in range(start, min(start + batch, n_actors))
        ]
        yield wire.encode({"type": "actors", "actors": rows})


LIST_PATHS = [
    "/api/actors?limit=100",
    "/api/tasks?limit=100",
    "/api/tasks?limit=100&filter=state=FAILED",
    "/api/actors?limit=100&filter=state=DEAD",
    "/api/tasks/summary",
    "/api/nodes?limit=100",
]


async def query_load(
    url: str, clients: int, requests: int, paths: list[str] = LIST_PATHS
) -> dict[str, list[float]]:
    lat: dict[str, list[float]] = {p: [] for p in paths}

    async def client(k: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            await c.get("/api/version")  # connect first: the connection is not the API's time
            for j in range(requests):
                path = paths[(k + j) % len(paths)]
                t = time.perf_counter()
                r = await c.get(path)
                lat[path].append(time.perf_counter() - t)
                if r.status_code != 200:
                    raise SystemExit(f"{path}: {r.status_code} {r.text[:200]}")

    await asyncio.gather(*(client(k) for k in range(clients)))
    return lat


async def export_timeline(url: str, dash: psutil.Process, path: str) -> dict:
    """Downloads the whole ``/api/timeline`` into ``path``, sampling the dashboard's RSS."""
    samples: list[int] = []
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            samples.append(dash.memory_info().rss)
            try:
                await asyncio.wait_for(stop.wait(), 0.2)
            except TimeoutError:
                pass

    rss_before = dash.memory_info().rss
    sampler = asyncio.ensure_future(sample())
    t = time.perf_counter()
    size = 0
    try:
        async with httpx.AsyncClient(base_url=url, timeout=600) as c:
            async with c.stream("GET", "/api/timeline") as r:
                if r.status_code != 200:
                    raise SystemExit(f"/api/timeline: {r.status_code}")
                with open(path, "wb") as f:
                    async for chunk in r.aiter_bytes(1 << 20):
                        f.write(chunk)
                        size += len(chunk)
    finally:
        stop.set()
        await sampler
    seconds = time.perf_counter() - t
    info = trace_info(path)
    return {
        "seconds": round(seconds, 1),
        "tasks": info.get("tasks"),
        "dropped": info.get("dropped"),
        "bytes": size,
        "bytes_per_task": round(size / max(info.get("tasks") or 1, 1)),
        "dashboard_rss_mb_before": round(rss_before / 2**20),
        "dashboard_rss_mb_peak": round(max(samples + [rss_before]) / 2**20),
        "rss_samples": len(samples),
    }


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(int(len(values) * q), len(values) - 1)] * 1000


class RssSampler:
    """The dashboard's RSS every 0.2 s for the whole run, per phase (ingest, lists...): the
    peak of a burst is missed by a reading taken once it is over."""

    def __init__(self, dash: psutil.Process) -> None:
        self.dash = dash
        self.phase = "start"
        self.peaks: dict[str, int] = {}
        self._stop = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    def sample(self) -> int:
        rss = self.dash.memory_info().rss
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), rss)
        return rss

    async def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            try:
                await asyncio.wait_for(self._stop.wait(), 0.2)
            except TimeoutError:
                pass

    async def stop(self) -> None:
        self._stop.set()
        await self._task

    def high_water_mark(self) -> int:
        """The kernel's peak RSS of the process (VmHWM): what no sampling can miss."""
        with open(f"/proc/{self.dash.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmHWM in /proc/PID/status (not Linux?)")


async def main_async(args: argparse.Namespace) -> dict:
    session = tempfile.mkdtemp(prefix="ember-dash-bench-")
    proc, url, agent_address = start_dashboard(session)
    dash = psutil.Process(proc.pid)
    rss = RssSampler(dash)
    try:
        rss.phase = "ingest"
        agents = [FakeAgent(agent_address, i) for i in range(args.nodes)]
        stop = asyncio.Event()
        runners = [asyncio.ensure_future(a.run(stop)) for a in agents]
        t0 = time.perf_counter()
        n = 0
        for msg in actor_batches(args.actors):
            agents[n % len(agents)].queue.put_nowait(msg)
            n += 1
        for msg in task_batches(args.tasks):
            agents[n % len(agents)].queue.put_nowait(msg)
            n += 1
        want_events = args.tasks * 2
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            deadline = time.monotonic() + 900
            while True:
                st = (await c.get("/api/cluster_status")).json()
                if (
                    st["ingested"]["task_events"] >= want_events
                    and sum(st["actors"].values()) >= args.actors
                ):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"ingestion did not finish: {st['ingested']}")
                await asyncio.sleep(0.5)
        ingest_s = time.perf_counter() - t0
        rss_after_ingest = rss.sample()
        rss.phase = "lists"
        cpu0 = sum(dash.cpu_times()[:2])
        lat = await load_in_subprocess(url, args.clients, args.requests, LIST_PATHS)
        # The dashboard's CPU per request: the service time, whatever else runs on the machine
        # (includes the 100 agents' metrics it ingests meanwhile, so it is an upper bound).
        n_req = sum(len(v) for v in lat.values())
        cpu_ms_per_request = (sum(dash.cpu_times()[:2]) - cpu0) * 1000 / max(n_req, 1)
        # One client; /metrics among the paths, as Prometheus scrapes a target: its own latency.
        sequential = await load_in_subprocess(url, 1, 60, [*LIST_PATHS, "/metrics"])
        rss_peak = max(rss_after_ingest, dash.memory_info().rss)
        # /metrics under 20 concurrent scrapers (a Prometheus per client, as a worst case).
        rss.phase = "metrics"
        metrics_lat = (
            await load_in_subprocess(url, args.clients, args.metrics_requests, ["/metrics"])
        )["/metrics"]
        rss_peak = max(rss_peak, dash.memory_info().rss)
        # The whole timeline into a file, the dashboard's memory sampled meanwhile.
        rss.phase = "timeline"
        timeline = await export_timeline(url, dash, os.path.join(session, "timeline.json"))
        os.unlink(os.path.join(session, "timeline.json"))
        rss_peak = max(rss_peak, timeline["dashboard_rss_mb_peak"] * 2**20)
        await rss.stop()
        rss_hwm = rss.high_water_mark()
        stop.set()
        await asyncio.gather(*runners, return_exceptions=True)
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            st = (await c.get("/api/cluster_status")).json()
            nodes = (await c.get("/api/nodes?limit=1")).json()["total"]
        return {
            "tasks": args.tasks,
            "actors": args.actors,
            "nodes": nodes,
            "clients": args.clients,
            "ingest_seconds": round(ingest_s, 1),
            "task_events_per_second": round(want_events / ingest_s),
            # After ingestion, under the loads and during the export (the figure of earlier
            # runs), then the peak of the samples taken every 0.2 s throughout, by phase,
            # and the kernel's high-water mark (a burst between two samples included).
            "dashboard_rss_mb": round(rss_peak / 2**20),
            "dashboard_rss_mb_sampled": {k: round(v / 2**20) for k, v in rss.peaks.items()},
            "dashboard_rss_mb_hwm": round(rss_hwm / 2**20),
            "tasks_kept": sum(st["tasks"].values()),
            "tasks_dropped": st["dropped"]["tasks"],
            "dashboard_cpu_ms_per_request": round(cpu_ms_per_request, 2),
            "latency_ms": {
                p: {"n": len(v), "p50": round(pct(v, 0.5), 1), "p99": round(pct(v, 0.99), 1)}
                for p, v in lat.items()
            },
            "sequential_latency_ms": {
                p: {"n": len(v), "p50": round(pct(v, 0.5), 1), "p99": round(pct(v, 0.99), 1)}
                for p, v in sequential.items()
            },
            "metrics_latency_ms": {
                "n": len(metrics_lat),
                "p50": round(pct(metrics_lat, 0.5), 1),
                "p99": round(pct(metrics_lat, 0.99), 1),
            },
            "timeline_export": timeline,
            "load_average": os.getloadavg(),
        }
    finally:
        await rss.stop()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(session, ignore_errors=True)  # its logs and the exported trace


async def load_in_subprocess(
    url: str, clients: int, requests: int, paths: list[str]
) -> dict[str, list[float]]:
    """``clients`` concurrent clients making ``requests`` each over ``paths``, in their own
    process (the 100 fake agents here must not delay them): {path: latencies in ms}."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--load-only",
        url,
        "--clients",
        str(clients),
        "--requests",
        str(requests),
        "--paths",
        ",".join(paths),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"the HTTP load on {paths} failed ({proc.returncode})")
    return json.loads(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=1_000_000)
    p.add_argument("--actors", type=int, default=20_000)
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--requests", type=int, default=50, help="per client")
    p.add_argument("--metrics-requests", type=int, default=10, help="/metrics scrapes per client")
    p.add_argument("--json", default=None)
    p.add_argument("--load-only", default=None, help=argparse.SUPPRESS)
    p.add_argument("--paths", default=None, help=argparse.SUPPRESS)  # with --load-only
    args = p.parse_args()
    if args.load_only:
        paths = args.paths.split(",") if args.paths else LIST_PATHS
        lat = asyncio.run(query_load(args.load_only, args.clients, args.requests, paths))
        print(json.dumps(lat))
        return
    res = asyncio.run(main_async(args))
    print(json.dumps(res, indent=2))
    lists = [
        res["latency_ms"]["/api/actors?limit=100"]["p99"],
        res["latency_ms"]["/api/tasks?limit=100"]["p99"],
    ]
    tl = res["timeline_export"]
    print(
        f"\nlist p99: actors {lists[0]} ms, tasks {lists[1]} ms (target < 100); "
        f"/metrics p99 {res['sequential_latency_ms']['/metrics']['p99']} ms for one scraper "
        f"(target < 300), {res['metrics_latency_ms']['p99']} ms under {res['clients']}; "
        f"timeline of {tl['tasks']} tasks in {tl['seconds']} s (target < 60), dashboard RSS "
        f"{tl['dashboard_rss_mb_before']} -> peak {tl['dashboard_rss_mb_peak']} MB during it; "
        f"dashboard peak {res['dashboard_rss_mb']} MB (target < 500), sampled by phase "
        f"{res['dashboard_rss_mb_sampled']}, high-water mark {res['dashboard_rss_mb_hwm']} MB"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
