#!/usr/bin/env python3
"""Ray Serve 2.60 and ember.serve side by side on this machine (issue 31's performance rows).

The same Serve programs on both (the runtime imported by name, as a migrated program does),
each on a fresh local node of 8 logical CPUs with one HTTP proxy on loopback:

- **http**: a no-op function deployment (1 replica) behind the proxy, ``c`` clients each
  sending its next GET as soon as the last is answered (keep-alive), for S seconds at
  ``c`` = 1, 16 and 32: requests/s, p50 and p99 latency;
- **handle**: ``DeploymentHandle.remote()`` to a no-op class deployment, from the driver
  (one at a time with ``.result()``, and 64 in flight with ``await``) and from another
  deployment (one at a time, awaited): calls/s;
- **batch**: a ``@serve.batch(max_batch_size=16)`` deployment called with 64 in flight
  from the driver: calls/s and the mean batch size it saw;
- **first 200**: from ``serve.run`` of a new application to its first 200 over HTTP;
- **rolling update**: a 2-replica deployment under a steady R requests/s is redeployed with
  new code (a new init argument); the seconds ``serve.run`` took to finish the update and
  the requests that failed meanwhile (issue 31: 0 on Ember; Ray: measured).

The HTTP load comes from a small keep-alive HTTP/1.1 client written on asyncio streams
(standard library only), run as a separate process with the half's interpreter, so both
systems face the same client and the client's CPU is not the driver's. On a 2-core machine
that client competes with the system under test; the ratio is what compares.

Each half runs in a subprocess of its own environment (Ray from the judge venv
``tests/tools/.ray-venv`` or ``--ray-python``; Ray is never a dependency of Ember)::

    .venv/bin/python benchmarks/serve_compare.py            # full sizes (~2 min per side)
    .venv/bin/python benchmarks/serve_compare.py --quick    # ~30 s per side
    .venv/bin/python benchmarks/serve_compare.py --quick --only ember

Only the standard library is imported at the top: Ray's interpreter runs this same file.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from halves import (  # benchmarks/: the script's own directory
    half_parser,
    machine_line,
    run_halves,
    stop_on_sigterm,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SIZES = {
    "full": {
        "http_s": 8.0,
        "calls": 3000,
        "inflight_calls": 6000,
        "batch_calls": 6000,
        "rate": 200,
    },
    "quick": {"http_s": 1.5, "calls": 300, "inflight_calls": 600, "batch_calls": 800, "rate": 100},
}
CONCURRENCY = (1, 16, 32)
IN_FLIGHT = 64
BATCH_SIZE = 16
HOST = "127.0.0.1"
DEADLINE_S = 120.0  # any one wait of the benchmark (a deploy, a first answer)


# --------------------------------------------------------------------------------------
# The load client (a process of its own: ``--load JSON``)
# --------------------------------------------------------------------------------------


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """One HTTP/1.1 response: (status, body, the server keeps the connection)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip().lower()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            parts.append(await reader.readexactly(size + 2))
            if size == 0:
                break
        body = b"".join(p[:-2] for p in parts)
    else:
        body = await reader.read()
        return status, body, False
    return status, body, headers.get("connection") != "close"


class Load:
    """Counts and latencies of one load run."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.failed = 0
        self.bodies: dict[str, int] = {}  # answer text -> how many (the rolling update's versions)
        self.errors: dict[str, int] = {}  # what failed -> how many

    def fail(self, what: str) -> None:
        self.failed += 1
        self.errors[what] = self.errors.get(what, 0) + 1


async def _client(
    port: int, path: str, load: Load, stop: Any, interval: float, offset: float
) -> None:
    """One connection sending GETs until ``stop()``; ``interval`` > 0 paces it (one request
    every ``interval`` s, the first after ``offset``), 0 sends the next as soon as the last
    is answered."""
    request = f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode()
    conn: tuple | None = None
    due = time.perf_counter() + offset - interval
    while not stop():
        if interval:
            due += interval
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
        started = time.perf_counter()
        try:
            if conn is None:
                conn = await asyncio.open_connection(HOST, port)
            conn[1].write(request)
            status, body, keep = await asyncio.wait_for(_response(conn[0]), 30.0)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as e:
            load.fail(type(e).__name__)
            if conn is not None:
                conn[1].close()
            conn = None
            continue
        load.latencies.append(time.perf_counter() - started)
        if status != 200:
            load.fail(f"HTTP {status}")
        text = body.decode(errors="replace")[:40]
        load.bodies[text] = load.bodies.get(text, 0) + 1
        if not keep:
            conn[1].close()
            conn = None
    if conn is not None:
        conn[1].close()


def run_load(spec: dict) -> dict:
    """``spec``: port, path, clients, seconds (closed loop) or rate (paced, until stdin
    closes). Returns requests, failed, requests/s, p50/p99 ms and the answers seen."""
    load = Load()
    done = threading.Event()
    if spec.get("rate"):
        threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
        interval = spec["clients"] / spec["rate"]
    else:
        interval = 0.0

    async def main() -> float:
        started = time.perf_counter()
        end = started + spec.get("seconds", 1e9)

        def stop() -> bool:
            return done.is_set() or time.perf_counter() >= end

        clients = spec["clients"]
        await asyncio.gather(
            *(
                # paced clients take turns, so the rate is steady rather than in bursts
                _client(spec["port"], spec["path"], load, stop, interval, i * interval / clients)
                for i in range(clients)
            )
        )
        return time.perf_counter() - started

    seconds = asyncio.run(main())
    lat = sorted(load.latencies)

    def pct(q: float) -> float | None:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 3) if lat else None

    ok = len(lat) - sum(n for what, n in load.errors.items() if what.startswith("HTTP"))
    return {
        "answered": len(lat),  # any status; "failed" counts non-200s and connection errors
        "failed": load.failed,
        "errors": load.errors,
        "seconds": seconds,
        "rps": ok / seconds if seconds else 0.0,  # 200s only
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "bodies": load.bodies,
    }


def _load_argv(spec: dict) -> list[str]:
    return [sys.executable, __file__, "--load", json.dumps(spec)]


def measure_http(port: int, path: str, clients: int, seconds: float) -> dict:
    # A short warm-up at the same concurrency (connections, the replica's first calls).
    for secs in (min(0.5, seconds), seconds):
        spec = {"port": port, "path": path, "clients": clients, "seconds": secs}
        out = subprocess.run(_load_argv(spec), capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise RuntimeError(f"the load client failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


# --------------------------------------------------------------------------------------
# One half: runs inside Ray's or Ember's interpreter
# --------------------------------------------------------------------------------------


def define(serve: Any) -> dict[str, Any]:
    """The deployments, built with the runtime's serve module."""

    @serve.deployment
    def noop(request: Any) -> str:
        return "ok"

    @serve.deployment
    class Noop:
        def __call__(self, x: Any = None) -> Any:
            return x

    @serve.deployment
    class Caller:
        def __init__(self, target: Any) -> None:
            self.target = target

        async def sequential(self, n: int) -> float:
            """n awaited calls, one at a time: the seconds they took (timed here)."""
            started = time.perf_counter()
            for i in range(n):
                await self.target.remote(i)
            return time.perf_counter() - started

    @serve.deployment(max_ongoing_requests=2 * IN_FLIGHT)
    class Batcher:
        def __init__(self) -> None:
            self.batches = 0
            self.items = 0

        @serve.batch(max_batch_size=BATCH_SIZE, batch_wait_timeout_s=0.01)
        async def __call__(self, xs: list) -> list:
            self.batches += 1
            self.items += len(xs)
            return [x * 2 for x in xs]

        def mean_batch(self) -> float:
            return self.items / self.batches if self.batches else 0.0

    @serve.deployment(num_replicas=2)
    class Versioned:
        def __init__(self, version: str) -> None:
            self.version = version

        def __call__(self, request: Any) -> str:
            return self.version

    return {
        "noop": noop,
        "Noop": Noop,
        "Caller": Caller,
        "Batcher": Batcher,
        "Versioned": Versioned,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def first_200(port: int, path: str) -> float:
    """Polls GET until a 200; the time it came (perf_counter)."""
    deadline = time.monotonic() + DEADLINE_S
    request = f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode()
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((HOST, port), timeout=10) as s:
                s.sendall(request)
                if s.recv(64).split(b" ")[1] == b"200":
                    return time.perf_counter()
        except (OSError, IndexError):
            pass
        time.sleep(0.005)
    raise TimeoutError(f"no 200 from {path} within {DEADLINE_S}s")


async def _in_flight(handle: Any, n: int, window: int) -> float:
    started = time.perf_counter()
    for lo in range(0, n, window):
        got = await asyncio.gather(*(handle.remote(i) for i in range(lo, min(n, lo + window))))
        assert got[0] in (lo, 2 * lo), got[0]  # Noop echoes, Batcher doubles
    return time.perf_counter() - started


def run_half(system: str, size: dict) -> dict:
    runtime = importlib.import_module(system)
    serve = importlib.import_module(f"{system}.serve")
    runtime.init(num_cpus=8, include_dashboard=False)
    port = free_port()
    serve.start(http_options={"host": HOST, "port": port})
    d = define(serve)
    out: dict[str, Any] = {}
    try:
        serve.run(d["noop"].bind(), name="noop", route_prefix="/noop")
        for c in CONCURRENCY:
            out[f"http_c{c}"] = measure_http(port, "/noop", c, size["http_s"])
        serve.delete("noop")

        h = serve.run(d["Noop"].bind(), name="handle", route_prefix=None)
        for i in range(50):
            h.remote(i).result()
        started = time.perf_counter()
        for i in range(size["calls"]):
            h.remote(i).result()
        out["handle_driver_sync"] = size["calls"] / (time.perf_counter() - started)
        n = size["inflight_calls"]
        asyncio.run(_in_flight(h, IN_FLIGHT, IN_FLIGHT))  # warm-up
        out["handle_driver_async"] = n / asyncio.run(_in_flight(h, n, IN_FLIGHT))
        serve.delete("handle")

        caller = serve.run(d["Caller"].bind(d["Noop"].bind()), name="caller", route_prefix=None)
        caller.sequential.remote(50).result()
        seconds = caller.sequential.remote(size["calls"]).result()
        out["handle_deployment_sync"] = size["calls"] / seconds
        serve.delete("caller")

        b = serve.run(d["Batcher"].bind(), name="batch", route_prefix=None)
        asyncio.run(_in_flight(b, IN_FLIGHT, IN_FLIGHT))
        n = size["batch_calls"]
        out["batch"] = n / asyncio.run(_in_flight(b, n, IN_FLIGHT))
        out["batch_mean_size"] = b.mean_batch.remote().result()
        serve.delete("batch")

        started = time.perf_counter()
        serve.run(d["noop"].bind(), name="fresh", route_prefix="/fresh")
        ran = time.perf_counter()
        out["first_200_s"] = first_200(port, "/fresh") - started
        out["run_returned_s"] = ran - started
        serve.delete("fresh")

        out["rolling_update"] = rolling_update(serve, d["Versioned"], port, size["rate"])
    finally:
        serve.shutdown()
        runtime.shutdown()
    return out


def rolling_update(serve: Any, versioned: Any, port: int, rate: int) -> dict:
    serve.run(versioned.bind("v1"), name="upd", route_prefix="/upd")
    spec = {"port": port, "path": "/upd", "clients": 8, "rate": rate}
    loader = subprocess.Popen(
        _load_argv(spec), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        time.sleep(1.0)  # the load is steady before the update starts
        started = time.perf_counter()
        serve.run(versioned.bind("v2"), name="upd", route_prefix="/upd")
        seconds = time.perf_counter() - started
        time.sleep(1.0)  # and after it: answers must keep coming, from v2 only
        out, _ = loader.communicate("", timeout=60)
    finally:
        if loader.poll() is None:
            loader.kill()
            loader.wait()
    load = json.loads(out)
    serve.delete("upd")
    return {
        "seconds": seconds,
        "requests": load["answered"],
        "failed": load["failed"],
        "errors": load["errors"],
        "answers": load["bodies"],
        "rate": rate,
    }


# --------------------------------------------------------------------------------------
# The driver: both halves, then the table
# --------------------------------------------------------------------------------------


# (row label, how to read it from a half's results, which way is better)
ROWS: list[tuple[str, Any, str]] = []
for _c in CONCURRENCY:
    ROWS += [
        (f"HTTP requests/s, {_c} client(s)", lambda r, c=_c: r[f"http_c{c}"]["rps"], "higher"),
        (f"HTTP p50 ms, {_c} client(s)", lambda r, c=_c: r[f"http_c{c}"]["p50_ms"], "lower"),
        (f"HTTP p99 ms, {_c} client(s)", lambda r, c=_c: r[f"http_c{c}"]["p99_ms"], "lower"),
    ]
ROWS += [
    (
        "handle calls/s, driver, .result() one at a time",
        lambda r: r["handle_driver_sync"],
        "higher",
    ),
    (
        f"handle calls/s, driver, {IN_FLIGHT} in flight",
        lambda r: r["handle_driver_async"],
        "higher",
    ),
    (
        "handle calls/s, from a deployment, one at a time",
        lambda r: r["handle_deployment_sync"],
        "higher",
    ),
    (f"@serve.batch({BATCH_SIZE}) calls/s, {IN_FLIGHT} in flight", lambda r: r["batch"], "higher"),
    ("@serve.batch mean batch size", lambda r: r["batch_mean_size"], "-"),
    ("serve.run -> first HTTP 200 (s)", lambda r: r["first_200_s"], "lower"),
    ("rolling update of 2 replicas (s)", lambda r: r["rolling_update"]["seconds"], "lower"),
    ("failed requests during the update", lambda r: r["rolling_update"]["failed"], "lower"),
]


def table(results: dict[str, dict]) -> list[dict]:
    """One row per figure: each system's value and Ember's advantage (Ember/Ray where higher
    is better, Ray/Ember where lower is; > 1 means Ember is better)."""
    rows = []
    for label, read, better in ROWS:
        row: dict[str, Any] = {"figure": label}
        for system, res in results.items():
            try:
                value = read(res)
            except (KeyError, TypeError):
                value = None
            row[system] = round(value, 3) if isinstance(value, float) else value
        ray, ember = row.get("ray"), row.get("ember")
        if better != "-" and isinstance(ray, int | float) and isinstance(ember, int | float):
            if better == "higher" and ray:
                row["ember advantage"] = round(ember / ray, 2)
            elif better == "lower" and ember:
                row["ember advantage"] = round(ray / ember, 2)
        rows.append(row)
    return rows


def print_table(rows: list[dict], size: dict, quick: bool) -> None:
    print(machine_line(f"sizes: {size} ({'--quick' if quick else 'full'})"))
    cols = ["figure", "ray", "ember", "ember advantage"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row.get(c, "")) for c in cols) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = half_parser(
        __doc__.split("\n")[0], "smaller sizes (~30 s a side)", "the interpreter that has Ray Serve"
    )
    parser.add_argument("--load", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    stop_on_sigterm()
    if args.load:
        print(json.dumps(run_load(json.loads(args.load))))
        return 0
    size = SIZES["quick" if args.quick else "full"]
    if args.half:
        result = run_half(args.half, size)
        Path(args.json).write_text(json.dumps(result))
        return 0
    results = run_halves(__file__, args.quick, args.only, args.ray_python)
    if results is None:
        return 2
    rows = table(results)
    print_table(rows, size, args.quick)
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
