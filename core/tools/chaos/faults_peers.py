"""Hostile peers on loopback: raw TCP connections to the GCS's and the raylets' ports that
never present the cluster token. Each one must be closed by the listener (counted as
refused), and the listening processes must not grow materially (RSS) for it.

- a huge frame announced before the token (1 GiB), then streamed: refused on its header;
- idle connections that never speak: closed at the authentication deadline;
- a flood of connections from one IP: those past the per-IP cap closed on arrival, the rest
  at the deadline.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import time
from collections.abc import Callable

import psutil
from ember import config
from ember.tools.chaos.harness import FaultError, Harness, Injected

MIB = 1024 * 1024
RSS_SLACK = 16 * MIB  # growth of a listener's RSS that counts as material
STREAM_LIMIT = 64 * MIB  # the huge frame's bytes sent before its refusal counts as too late
IDLE_PER_LISTENER = 4
FLOOD_EXTRA = 64  # connections past the per-IP cap, per listener


def _listeners(h: Harness) -> dict[str, tuple[str, int]]:
    """{name: (address, pid of its process)} of the cluster's TCP listeners."""
    nodes = {n["node_id"]: n for n in h.cluster.gcs_call("list_nodes") if n["state"] == "ALIVE"}
    head, far = nodes[h.head.node_id], nodes[h.far.node_id]
    head_raylet, far_raylet = h.head.procs["raylet"].pid, h.far.procs["raylet"].pid
    return {
        "GCS": (h.head.gcs_address, h.head.procs["gcs_server"].pid),
        "head raylet": (head["tcp_address"], head_raylet),
        "worker raylet": (far["tcp_address"], far_raylet),
        "worker data port": (far["data_address"], far_raylet),
    }


def _connect(address: str) -> socket.socket:
    host, port = address.removeprefix("tcp:").rsplit(":", 1)
    return socket.create_connection((host.strip("[]"), int(port)), timeout=5)


def _rss(pids: set[int]) -> dict[int, int]:
    return {pid: psutil.Process(pid).memory_info().rss for pid in pids}


def _closed_at(socks: list[socket.socket], timeout: float) -> list[float | None]:
    """For each socket, seconds until its listener closed it (None: still open)."""
    start = time.monotonic()
    when: list[float | None] = [None] * len(socks)
    waiting = {s.fileno(): i for i, s in enumerate(socks)}
    while waiting and time.monotonic() - start < timeout:
        ready, _, _ = select.select(list(waiting), [], [], 0.05)
        for fd in ready:
            i = waiting[fd]
            try:
                data = socks[i].recv(65536)
            except OSError:  # a reset is a close too
                data = b""
            if not data:
                when[i] = time.monotonic() - start
                del waiting[fd]
    return when


def _huge_frame(address: str) -> bool:
    """Announces a 1 GiB token, then streams it: True when the listener closes the
    connection before STREAM_LIMIT bytes."""
    with _connect(address) as s:
        s.sendall(struct.pack("<I", 1 << 30))
        chunk, sent = b"\0" * MIB, 0
        deadline = time.monotonic() + 20
        try:
            while sent < STREAM_LIMIT and time.monotonic() < deadline:
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:  # closed by the listener: the kernel answers the rest with a reset
            return True
        return _closed_at([s], 2.0)[0] is not None


def _checked(h: Harness, attack: Callable[[dict[str, str]], tuple[int, int]]) -> Injected:
    """Runs ``attack`` ({name: address} -> (connections, refused)) and checks the listeners
    are alive, did not grow, and a peer with the token still gets in."""
    listeners = _listeners(h)
    pids = {pid for _, pid in listeners.values()}
    before = _rss(pids)
    made, refused = attack({name: address for name, (address, _) in listeners.items()})
    try:
        after = _rss(pids)
    except psutil.Error as e:
        raise FaultError(f"a listener's process died: {e}") from None
    grew = {pid: (after[pid] - before[pid]) // MIB for pid in pids}
    if any(after[pid] - before[pid] > RSS_SLACK for pid in pids):
        raise FaultError(f"a listener's RSS grew materially (MiB by pid): {grew}")
    if h.cluster.gcs_call("ping") != "pong":
        raise FaultError("the GCS no longer answers a peer with the token")
    what = f"{made} connections to {len(listeners)} listeners"
    if refused < made:
        raise FaultError(f"{what}: only {refused} refused or closed")
    return Injected(f"{what}, RSS growth MiB {sorted(grew.values())}", refused=refused)


def huge_frame(h: Harness) -> Injected:
    def attack(addresses: dict[str, str]) -> tuple[int, int]:
        refused = sum(_huge_frame(a) for a in addresses.values())
        return len(addresses), refused

    return _checked(h, attack)


def _hold_open(addresses: dict[str, str], per_listener: int) -> tuple[int, list[float | None]]:
    socks: list[socket.socket] = []
    try:
        for address in addresses.values():
            for _ in range(per_listener):
                try:
                    socks.append(_connect(address))
                except OSError:
                    pass  # refused at connect: counted below as closed at once
        refused_at_connect = len(addresses) * per_listener - len(socks)
        when = _closed_at(socks, config.auth_deadline_seconds + 10)
        return refused_at_connect, when
    finally:
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()


def idle(h: Harness) -> Injected:
    def attack(addresses: dict[str, str]) -> tuple[int, int]:
        at_connect, when = _hold_open(addresses, IDLE_PER_LISTENER)
        return at_connect + len(when), at_connect + sum(t is not None for t in when)

    return _checked(h, attack)


def flood(h: Harness) -> Injected:
    per_listener = config.max_unauthenticated_per_ip + FLOOD_EXTRA

    def attack(addresses: dict[str, str]) -> tuple[int, int]:
        at_connect, when = _hold_open(addresses, per_listener)
        early = at_connect + sum(
            t is not None and t < config.auth_deadline_seconds * 0.6 for t in when
        )
        if early < FLOOD_EXTRA * len(addresses):
            raise FaultError(
                f"only {early} connections past the per-IP cap were turned away on arrival"
            )
        return at_connect + len(when), at_connect + sum(t is not None for t in when)

    return _checked(h, attack)


PEERS = [
    ("peer: huge frame before token", huge_frame),
    ("peer: idle without token", idle),
    ("peer: flood from one IP", flood),
]
