"""Where one actor call's CPU goes: per process and per phase, in microseconds per call.

    .venv/bin/python benchmarks/call_breakdown.py [--seconds 8] [--modes sync,async,concurrent] [--json F]

For each mode (``sync``: ``get(a.f.remote())`` one at a time; ``async``: batches of 1,000
calls, then one ``get``) it runs calls to a no-op actor method for ``--seconds``, and reads:

- each process's CPU time (user + system, from /proc through psutil) before and after: the
  caller (this driver), the callee (the actor's worker), and the processes between (raylet,
  GCS, dashboard, agent) — divided by the calls made;
- where that time went, from py-spy sampling the caller and the callee at once: every
  sample's stack is walked from its innermost frame outwards to the first function the
  ``PHASES`` table names (submit, encode, send, receive, decode, execute, reply, resolve);
  samples in none are "loop and other" (the event loop, thread handoffs, bookkeeping).

Then a floor in the same run: a request and reply of a few bytes over a Unix socket between
two Python processes on uvloop (``--no-floor`` skips it). The ratio sync call / floor is the
figure issue 32 tracks. Sampling shares are estimates (py-spy at ``--rate`` Hz); CPU totals
are exact. Run it on a quiet machine: other load changes CPU per call through caches, and
sampling attributes waits as they fall.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

# Innermost match wins, so the specific phases (encode, decode, send) are found before the
# broader ones (submit, execute) that call them. Keys: function names as py-spy shows them.
PHASES: dict[str, tuple[str, ...]] = {
    "encode": (
        "encode_request",
        "encode_reply",
        "encode_oneway",
        "encode_args",
        "serialize",
        "dumps",
        "frame",
    ),
    "decode": ("feed", "loads", "deserialize", "resolve_args", "decode_error"),
    "send": ("_write_frame_locked", "_write", "_flush", "write_direct", "_write_now", "sendmsg"),
    "receive": ("data_received", "_dispatch", "_read_ready", "recv_into"),
    "execute": ("small_value", "_load", "_bind"),
    "reply": ("store_returns", "_store_values", "_run_and_reply", "resolve", "_reply_now"),
    "resolve": ("handle_task_reply", "_on_reply", "_task_done", "get", "wait_for", "_resolve"),
    "submit": (
        "_submit",
        "submit_actor_task",
        "prepare_task",
        "submit_direct",
        "__init__",
        "new_task_id",
    ),
}
ORDER = ["submit", "encode", "send", "receive", "decode", "execute", "reply", "resolve"]
_PHASE_OF = {fn: phase for phase, fns in PHASES.items() for fn in fns}


def _function(frame: str) -> str:
    """``Class.method (path:line)`` -> ``method``."""
    name = frame.split(" (", 1)[0]
    return name.rsplit(".", 1)[-1]


def phase_shares(raw_file: Path) -> dict[str, float]:
    """{phase: share of samples} from a py-spy ``--format raw`` file."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw_file.read_text().splitlines():
        if not line.strip():
            continue
        stack, _, n = line.rpartition(" ")
        phase = "loop and other"
        for frame in reversed(stack.split(";")):
            found = _PHASE_OF.get(_function(frame))
            if found:
                phase = found
                break
        counts[phase] += int(n)
    total = sum(counts.values()) or 1
    return {k: v / total for k, v in counts.items()}


def _cpu(proc: psutil.Process) -> float:
    try:
        t = proc.cpu_times()
        return t.user + t.system
    except psutil.NoSuchProcess:
        return 0.0


def _between(driver: psutil.Process, actor_pid: int) -> dict[str, list[psutil.Process]]:
    """The node's own processes, by role: every process the driver started that is not the
    callee (the raylet, GCS, dashboard, agent, zygote, idle workers)."""
    out: dict[str, list[psutil.Process]] = collections.defaultdict(list)
    for p in driver.children(recursive=True):
        if p.pid == actor_pid:
            continue
        try:
            line = " ".join(p.cmdline())
        except psutil.Error:
            continue
        role = next((name for name, mod in _ROLES.items() if mod in line), "other workers")
        out[role].append(p)
    return out


_ROLES = {
    "gcs": "ember.gcs.server",
    "raylet": "ember.raylet.raylet",
    "dashboard": "ember.dashboard.server",
    "agent": "ember.agent",
    "zygote": "zygote",
}


def measure(mode: str, seconds: float, rate: int, spy: str) -> dict:
    import ember

    @ember.remote
    class Actor:
        def small_value(self) -> bytes:
            return b"ok"

        def pid(self) -> int:
            return os.getpid()

    # concurrent: a threaded actor (its calls run on a pool of 16 threads), called as async.
    actor = Actor.options(max_concurrency=16).remote() if mode == "concurrent" else Actor.remote()
    actor_pid = ember.get(actor.pid.remote())
    driver = psutil.Process()
    callee = psutil.Process(actor_pid)
    others = _between(driver, actor_pid)

    def batch() -> int:
        if mode == "sync":
            for _ in range(200):
                ember.get(actor.small_value.remote())
            return 200
        ember.get([actor.small_value.remote() for _ in range(1000)])
        return 1000

    for _ in range(3):
        batch()
    tmp = Path(tempfile.mkdtemp(prefix="call-breakdown-"))
    spies = [
        subprocess.Popen(
            [spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", str(rate), "-f", "raw"]
            + ["-o", str(tmp / f"{who}.raw"), "--nonblocking"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for who, pid in (("caller", os.getpid()), ("callee", actor_pid))
    ]
    time.sleep(0.3)  # py-spy attaches
    roles = sorted(others)

    def sample() -> list[float]:
        return [_cpu(driver), _cpu(callee)] + [sum(_cpu(p) for p in others[r]) for r in roles]

    before = sample()
    calls, started = 0, time.monotonic()
    while time.monotonic() - started < seconds - 0.5:
        calls += batch()
    wall = time.monotonic() - started
    after = sample()
    for s in spies:
        s.wait(timeout=seconds + 30)
    ember.kill(actor)
    per_call = [(a - b) / calls * 1e6 for a, b in zip(after, before, strict=True)]
    result = {
        "mode": mode,
        "calls": calls,
        "calls_per_s": calls / wall,
        "wall_us_per_call": wall / calls * 1e6,
        "cpu_us_per_call": dict(zip(("caller", "callee", *roles), per_call, strict=True)),
        "phases_us_per_call": {},
    }
    for who, cpu in (("caller", per_call[0]), ("callee", per_call[1])):
        raw = tmp / f"{who}.raw"
        shares = phase_shares(raw) if raw.exists() else {}
        result["phases_us_per_call"][who] = {k: cpu * v for k, v in shares.items()}
    return result


_ECHO = """
import asyncio, socket, sys, uvloop
async def main(path):
    async def serve(reader, writer):
        while True:
            data = await reader.readexactly(8)
            writer.write(data)
    server = await asyncio.start_unix_server(serve, path)
    print("ready", flush=True)
    await server.serve_forever()
uvloop.run(main(sys.argv[1]))
"""


def unix_socket_floor(seconds: float) -> float:
    """Microseconds per 8-byte request and reply over a Unix socket to another Python
    process on uvloop, the caller blocking on its socket (the floor a sync call compares to)."""
    path = os.path.join(tempfile.mkdtemp(prefix="echo-"), "s")
    server = subprocess.Popen(
        [sys.executable, "-c", _ECHO, path], stdout=subprocess.PIPE, text=True
    )
    try:
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the echo server did not start")
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(path)
        n, started = 0, time.monotonic()
        while time.monotonic() - started < seconds:
            for _ in range(1000):
                sock.sendall(b"12345678")
                got = b""
                while len(got) < 8:
                    got += sock.recv(8 - len(got))
            n += 1000
        sock.close()
        return (time.monotonic() - started) / n * 1e6
    finally:
        server.kill()
        server.wait(timeout=10)


def print_table(results: list[dict], floor: float | None) -> None:
    for r in results:
        cpu = r["cpu_us_per_call"]
        print(
            f"\n{r['mode']}: {r['calls_per_s']:,.0f} calls/s, {r['wall_us_per_call']:.1f} us "
            "wall per call; CPU us per call: "
            + ", ".join(f"{who} {us:.1f}" for who, us in cpu.items())
        )
        print(f"  {'phase':<16}{'caller us':>10}{'callee us':>10}")
        phases = r["phases_us_per_call"]
        for phase in [*ORDER, "loop and other"]:
            c = phases.get("caller", {}).get(phase, 0.0)
            e = phases.get("callee", {}).get(phase, 0.0)
            print(f"  {phase:<16}{c:>10.1f}{e:>10.1f}")
    if floor is not None:
        print(f"\nUnix-socket request and reply between two Python processes: {floor:.1f} us")
        for r in results:
            if r["mode"] == "sync":
                print(f"sync actor call / floor: {r['wall_us_per_call'] / floor:.1f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="per mode")
    parser.add_argument("--modes", default="sync,async")
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--no-floor", action="store_true")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    spy = str(Path(sys.executable).with_name("py-spy"))
    if not os.path.exists(spy):
        parser.error(f"py-spy is not installed beside {sys.executable}: pip install py-spy")
    import ember

    ember.init(num_cpus=2)
    try:
        results = [measure(m, args.seconds, args.rate, spy) for m in args.modes.split(",")]
    finally:
        ember.shutdown()
    floor = None if args.no_floor else unix_socket_floor(min(args.seconds, 3.0))
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, {time.ctime()}")
    print_table(results, floor)
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "floor_us": floor}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
