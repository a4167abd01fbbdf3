"""The wire's own cost, this checkout against another one's ``connection.py``, in one run.

    git show 8ef60f1:core/protocol/connection.py > /tmp/wire_before.py
    .venv/bin/python benchmarks/wire_bench.py --other /tmp/wire_before.py

Rows (each the best of ``--rounds`` interleaved rounds, so both sides see the same noise):
- encode: ``request_cb`` of a task-sized body into a transport that keeps what it is given
  (the pickling, framing and write coalescing a submitter pays per task);
- decode: ``data_received`` of those frames one at a time, dispatch stubbed out (the
  reader's cost per message);
- round trip: sequential ``await conn.call`` over a Unix socket, both ends on one uvloop;
- pipelined: ``request_cb`` with 200 in flight over a Unix socket (the task push path's
  shape: many pushes, replies handled by callback).

The other side must be a self-contained ``connection.py`` (as it was before the wire was split
into codec, stream and transports, e.g. at 8ef60f1); it is loaded from its file under another
module name.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
import tempfile
import time

import uvloop


def load_other(path: str):
    spec = importlib.util.spec_from_file_location("other_connection", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Sink(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[bytes] = []

    def write(self, data) -> None:
        self.chunks.append(bytes(data))

    def get_extra_info(self, name, default=None):
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        pass


def task_body() -> dict:
    # About the size and shape of a small task's spec: ids, a function id, two inline args.
    return {
        "task_id": os.urandom(24),
        "job_id": os.urandom(4),
        "function_id": os.urandom(16),
        "function_name": "module.function",
        "args": [(0, 1, b"x" * 40, []), (0, 1, b"y" * 40, [])],
        "num_returns": 1,
        "resources": {"CPU": 1.0},
        "owner": (os.urandom(16), "unix:/tmp/session/sockets/worker-abcdef"),
    }


def bench_encode(mod, n: int) -> float:
    loop = uvloop.new_event_loop()
    conn = mod.Connection({}, name="bench")
    sink = Sink()

    async def run() -> float:
        conn.connection_made(sink)
        body = task_body()
        cb = _noop_cb
        t0 = time.perf_counter()
        for i in range(n):
            conn.request_cb("push_task", body, cb)
            if i % 64 == 63:
                conn._flush()
        conn._flush()
        return time.perf_counter() - t0

    try:
        return loop.run_until_complete(run()) / n
    finally:
        loop.close()


def frames_for(mod, n: int) -> list[bytes]:
    loop = uvloop.new_event_loop()
    conn = mod.Connection({}, name="bench")
    sink = Sink()

    async def run() -> None:
        conn.connection_made(sink)
        body = task_body()
        for _ in range(n):
            conn.request_cb("push_task", body, _noop_cb)
            conn._flush()

    loop.run_until_complete(run())
    loop.close()
    return sink.chunks


def bench_decode(mod, frames: list[bytes]) -> float:
    conn = mod.Connection({}, name="bench")
    conn._dispatch = _noop_dispatch
    t0 = time.perf_counter()
    for f in frames:
        conn.data_received(f)
    return (time.perf_counter() - t0) / len(frames)


def bench_socket(mod, n: int, inflight: int) -> tuple[float, float]:
    loop = uvloop.new_event_loop()
    path = os.path.join(tempfile.mkdtemp(), "s")

    async def run() -> tuple[float, float]:
        handlers = {"push_task": lambda c, b: {"returns": [("inline", 0, b"r", [])]}}
        server, addr = await mod.serve("unix:" + path, handlers, name="srv")
        conn = await mod.connect(addr, name="cli")
        body = task_body()
        for _ in range(200):
            await conn.call("push_task", body)
        t0 = time.perf_counter()
        for _ in range(n):
            await conn.call("push_task", body)
        rtt = (time.perf_counter() - t0) / n
        done = asyncio.get_running_loop().create_future()
        state = {"sent": 0, "got": 0}

        def on_reply(result, exc) -> None:
            state["got"] += 1
            if state["sent"] < n:
                state["sent"] += 1
                conn.request_cb("push_task", body, on_reply)
            elif state["got"] == n and not done.done():
                done.set_result(None)

        t0 = time.perf_counter()
        for _ in range(inflight):
            state["sent"] += 1
            conn.request_cb("push_task", body, on_reply)
        await done
        piped = (time.perf_counter() - t0) / n
        conn.close()
        server.close()
        return rtt, piped

    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()
        os.unlink(path) if os.path.exists(path) else None


def _noop_cb(result, exc) -> None:
    pass


def _noop_dispatch(msg) -> None:
    pass


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--other", required=True, help="a self-contained connection.py to compare with")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("-n", type=int, default=20000)
    args = p.parse_args()
    from ember.protocol import connection as ours

    sides = {"other": load_other(args.other), "this": ours}
    frames = {k: frames_for(m, args.n) for k, m in sides.items()}
    best: dict[tuple[str, str], float] = {}

    def keep(row: str, side: str, v: float) -> None:
        best[(row, side)] = min(v, best.get((row, side), float("inf")))

    for _ in range(args.rounds):
        for side, mod in sides.items():
            keep("encode (us/msg)", side, bench_encode(mod, args.n) * 1e6)
            keep("decode (us/msg)", side, bench_decode(mod, frames[side]) * 1e6)
            rtt, piped = bench_socket(mod, args.n // 4, 200)
            keep("round trip (us)", side, rtt * 1e6)
            keep("pipelined (us/req)", side, piped * 1e6)
    print(f"{'row':22} {'other':>9} {'this':>9} {'this/other':>10}")
    for row in dict.fromkeys(r for r, _ in best):
        o, t = best[(row, "other")], best[(row, "this")]
        print(f"{row:22} {o:9.2f} {t:9.2f} {t / o:10.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
