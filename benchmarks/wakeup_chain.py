"""What each thread hand-off costs a synchronous call on this machine, without Ember's work.

    .venv/bin/python benchmarks/wakeup_chain.py [--seconds 3] [--rounds 3] [--ember]

A sync actor call on Ember wakes four threads in turn: the actor's I/O thread (the request
arrives), the actor's executing thread (handed the call), the caller's I/O thread (the reply
arrives) and the caller's own thread (handed the result). This runs the same chain with
nothing else in it: two processes, a Unix socket, a request of 300 bytes and a reply of 250
(the sizes of a small call's), the I/O threads on uvloop as in Ember, and times four shapes:

- ``direct/direct``: the caller's thread writes and reads the socket itself; the callee's
  loop thread answers in its read callback. Two wake-ups: the floor.
- ``direct/handoff``: the callee's loop thread hands each request to an executing thread
  (a ``queue.SimpleQueue``), which writes the reply. Three.
- ``handoff/direct``: the caller's loop thread reads the reply and wakes the caller's
  thread (a lock it sleeps on). Three.
- ``handoff/handoff``: both, the shape of Ember's sync call today. Four.

Rounds alternate the shapes (this VM's wake-up cost drifts over minutes); the table gives
each shape's median rate and wall time per call. With ``--ember`` the same rounds also time
``get(actor.method.remote())`` on a local Ember node, so the gap between Ember and the
four-hand-off chain is the CPU work of its call path, and the gap between the chain's shapes
is what removing a hand-off could buy. ``ember own`` is the same call with the caller
reading its own reply (``EMBER_OWN_REPLY_CHANNEL=1``, core_worker/own_replies.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

import psutil

REQUEST = b"q" * 300
REPLY = b"r" * 250
HEADER = struct.Struct("!I")
SHAPES = ("direct/direct", "direct/handoff", "handoff/direct", "handoff/handoff")


def _frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


def _whole_frames(buffer: bytes) -> tuple[int, bytes]:
    """How many whole frames ``buffer`` starts with, and what follows them."""
    count = 0
    while len(buffer) >= HEADER.size:
        (n,) = HEADER.unpack_from(buffer)
        if len(buffer) < HEADER.size + n:
            break
        buffer, count = buffer[HEADER.size + n :], count + 1
    return count, buffer


def _serve(path: str, handoff: bool) -> None:
    """The callee: answers each framed request with a framed reply, from its loop thread
    or (``handoff``) from an executing thread the loop hands it to."""
    import uvloop

    calls: queue.SimpleQueue = queue.SimpleQueue()

    def execute(sock: socket.socket) -> None:
        while True:
            if calls.get() is None:
                return
            sock.sendall(_frame(REPLY))

    class Callee(asyncio.Protocol):
        def connection_made(self, transport) -> None:
            self.transport, self.buffer = transport, b""
            if handoff:
                sock = transport.get_extra_info("socket")
                raw = socket.socket(fileno=os.dup(sock.fileno()))
                threading.Thread(target=execute, args=(raw,), daemon=True).start()

        def data_received(self, data: bytes) -> None:
            count, self.buffer = _whole_frames(self.buffer + data)
            for _ in range(count):
                if handoff:
                    calls.put(True)
                else:
                    self.transport.write(_frame(REPLY))

        def connection_lost(self, exc) -> None:
            calls.put(None)
            loop.stop()

    loop = uvloop.new_event_loop()
    server = loop.run_until_complete(loop.create_unix_server(Callee, path))
    print("ready", flush=True)
    loop.run_forever()
    server.close()


def _read_frame(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < HEADER.size:
        data += sock.recv(65536)
    (n,) = HEADER.unpack_from(data)
    while len(data) < HEADER.size + n:
        data += sock.recv(65536)
    return data[HEADER.size :]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (every thread)."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _time_shape(shape: str, seconds: float) -> tuple[float, float]:
    """Calls per second of one shape, a fresh callee process for it, and the CPU both
    processes spent per call (us)."""
    caller_handoff, callee_handoff = (part == "handoff" for part in shape.split("/"))
    path = os.path.join(tempfile.mkdtemp(prefix="wake-"), "s")
    argv = [sys.executable, __file__, "--serve", path] + (["--handoff"] if callee_handoff else [])
    callee = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert callee.stdout.readline().strip() == "ready"
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(path)
        cpu_before = _cpu_s(os.getpid()) + _cpu_s(callee.pid)
        if caller_handoff:
            rate, calls = _time_with_io_thread(sock, seconds)
        else:
            calls, deadline = 0, time.perf_counter() + seconds
            start = time.perf_counter()
            while time.perf_counter() < deadline:
                sock.sendall(_frame(REQUEST))
                _read_frame(sock)
                calls += 1
            rate = calls / (time.perf_counter() - start)
        cpu = _cpu_s(os.getpid()) + _cpu_s(callee.pid) - cpu_before
        sock.shutdown(socket.SHUT_RDWR)  # for every copy of the descriptor: the callee exits
        sock.close()
        return rate, cpu / calls * 1e6
    finally:
        callee.wait(timeout=30)
        os.unlink(path)
        os.rmdir(os.path.dirname(path))


def _time_with_io_thread(sock: socket.socket, seconds: float) -> tuple[float, int]:
    """The caller's thread writes; a uvloop thread reads each reply and releases the lock
    the caller's thread sleeps on (as Ember's get waits on a reply its I/O thread reads)."""
    import uvloop

    loop = uvloop.new_event_loop()
    waiter: list[threading.Lock] = []

    class Caller(asyncio.Protocol):
        buffer = b""

        def data_received(self, data: bytes) -> None:
            count, self.buffer = _whole_frames(self.buffer + data)
            for _ in range(count):
                waiter.pop().release()

    reader = socket.socket(fileno=os.dup(sock.fileno()))

    async def attach() -> None:
        await loop.connect_accepted_socket(Caller, reader)

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop.run_until_complete(attach())
    thread.start()
    calls, deadline = 0, time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        done = threading.Lock()
        done.acquire()
        waiter.append(done)
        sock.sendall(_frame(REQUEST))
        done.acquire()
        calls += 1
    rate = calls / (time.perf_counter() - start)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    return rate, calls


def _time_ember(seconds: float, own_replies: bool) -> tuple[float, float]:
    """Ember's sync actor call: its rate, and the CPU the driver and the actor spent per
    call (us; the node's other processes are not counted, as the chain has none).
    ``own_replies``: with ``EMBER_OWN_REPLY_CHANNEL`` on (the caller reads its reply)."""
    code = (
        "import os, time, ember, psutil\n"
        "ember.init(num_cpus=2)\n"
        "@ember.remote\n"
        "class A:\n"
        "    def f(self): return b'ok'\n"
        "    def pid(self): return os.getpid()\n"
        "a = A.remote(); actor = psutil.Process(ember.get(a.pid.remote()))\n"
        "def cpu(): return sum(psutil.Process().cpu_times()[:2]) + sum(actor.cpu_times()[:2])\n"
        f"n, end = 0, time.perf_counter() + {seconds}\n"
        "start, cpu0 = time.perf_counter(), cpu()\n"
        "while time.perf_counter() < end:\n"
        "    ember.get(a.f.remote()); n += 1\n"
        "print(n / (time.perf_counter() - start), (cpu() - cpu0) / n * 1e6)\n"
        "ember.shutdown()\n"
    )
    env = dict(os.environ, EMBER_OWN_REPLY_CHANNEL="1" if own_replies else "0")
    argv = [sys.executable, "-c", code]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    rate, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(rate), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per shape per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ember", action="store_true", help="also time Ember's sync call")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--handoff", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve, args.handoff)
        return
    shapes = list(SHAPES) + (["ember", "ember own"] if args.ember else [])
    rates: dict[str, list[float]] = {s: [] for s in shapes}
    cpus: dict[str, list[float]] = {s: [] for s in shapes}
    for r in range(args.rounds):
        order = shapes if r % 2 == 0 else shapes[::-1]
        for shape in order:
            if shape.startswith("ember"):
                rate, cpu = _time_ember(args.seconds * 2, own_replies=shape == "ember own")
            else:
                rate, cpu = _time_shape(shape, args.seconds)
            rates[shape].append(rate)
            cpus[shape].append(cpu)
            print(f"round {r + 1} {shape:16s} {rate:9,.0f} calls/s {cpu:7.1f} us CPU", flush=True)
    header = f"{'caller/callee':16s} {'calls/s':>9s} {'us/call':>8s} {'CPU us':>7s}  hand-offs"
    print(f"\n{header}  rounds (calls/s)")
    for shape in shapes:
        median = statistics.median(rates[shape])
        handoffs = "Ember" if shape.startswith("ember") else str(2 + shape.count("handoff"))
        each = " ".join(f"{x:,.0f}" for x in rates[shape])
        cpu = statistics.median(cpus[shape])
        print(f"{shape:16s} {median:9,.0f} {1e6 / median:8.1f} {cpu:7.1f}  {handoffs:>9s}  {each}")


if __name__ == "__main__":
    main()
