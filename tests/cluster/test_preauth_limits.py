"""Strangers at every TCP listener (issue 19 §4): before the cluster token, a peer costs a
listener at most a few KiB, a few seconds and a few sockets. Real processes, raw sockets: the
GCS, the raylet's framed port and data port, and the dashboard's agent hub."""

from __future__ import annotations

import asyncio
import os
import select
import socket
import struct
import time

import psutil
import pytest
from ember.cluster_utils import Cluster
from ember_test_utils import wait_until
from hub_probe import hub_address

DEADLINE = 1.5  # seconds, EMBER_AUTH_DEADLINE_SECONDS of the cluster below
PER_IP = 8  # EMBER_MAX_UNAUTHENTICATED_PER_IP
LIMITS_ENV = {
    "EMBER_AUTH_DEADLINE_SECONDS": str(DEADLINE),
    "EMBER_MAX_UNAUTHENTICATED_PER_IP": str(PER_IP),
}


@pytest.fixture(scope="module")
def limited():
    """A one-node cluster whose processes have short pre-authentication limits; yields it and
    the TCP addresses of its listeners."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1}, env=LIMITS_ENV)
    try:
        info = cluster.gcs_call("list_nodes")[0]
        hub = asyncio.run(hub_address(cluster.head_node.gcs_address, cluster.token))
        yield (
            cluster,
            {
                "gcs": cluster.head_node.gcs_address,
                "raylet": info["tcp_address"],
                "data": info["data_address"],
                "hub": "tcp:" + hub,
            },
        )
    finally:
        cluster.shutdown()


def _connect(address: str) -> socket.socket:
    host, port = address.removeprefix("tcp:").rsplit(":", 1)
    return socket.create_connection((host.strip("[]"), int(port)), timeout=5)


def _closed_at(socks: list[socket.socket], timeout: float) -> list[float | None]:
    """For each socket, seconds until the listener closed it (None: still open at timeout)."""
    start = time.monotonic()
    when: list[float | None] = [None] * len(socks)
    open_ = {s.fileno(): i for i, s in enumerate(socks)}
    while open_ and time.monotonic() - start < timeout:
        ready, _, _ = select.select(list(open_), [], [], 0.05)
        for fd in ready:
            i = open_[fd]
            try:
                data = socks[i].recv(65536)
            except OSError:  # reset: closed too
                data = b""
            if not data:
                when[i] = time.monotonic() - start
                del open_[fd]
    return when


def _log(cluster: Cluster, name: str) -> str:
    with open(os.path.join(cluster.head_node.session_dir, "logs", name)) as f:
        return f.read()


@pytest.mark.parametrize("listener", ["gcs", "raylet", "data"])
def test_a_huge_announced_first_frame_is_refused_on_its_header(limited, listener):
    cluster, addresses = limited
    proc = psutil.Process(
        cluster.head_node.procs["gcs_server" if listener == "gcs" else "raylet"].pid
    )
    before = proc.memory_info().rss
    with _connect(addresses[listener]) as s:
        s.sendall(struct.pack("<I", 1 << 30))  # "a 1 GiB token follows"
        sent, refused_after = 0, None
        chunk = b"\0" * (1 << 20)
        start = time.monotonic()
        try:
            while sent < 256 << 20 and time.monotonic() - start < 20:
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:  # the listener closed: the kernel answers the rest with a reset
            refused_after = sent
        assert refused_after is not None, "the listener took 256 MiB of an unauthenticated frame"
        assert refused_after < 64 << 20
    after = proc.memory_info().rss
    assert after - before < 16 << 20, f"RSS grew by {(after - before) >> 20} MiB"
    if listener == "gcs":
        log = wait_until(lambda: "oversized first frame" in _log(cluster, "gcs_server.log"))
        assert log
    assert cluster.gcs_call("ping") == "pong"


@pytest.mark.parametrize("listener", ["gcs", "raylet", "data", "hub"])
def test_idle_strangers_are_closed_at_the_deadline_and_capped_per_ip(limited, listener):
    cluster, addresses = limited
    n = PER_IP + 6
    socks = [_connect(addresses[listener]) for _ in range(n)]
    try:
        when = _closed_at(socks, DEADLINE + 10)
    finally:
        for s in socks:
            s.close()
    assert all(t is not None for t in when), f"connections still open: {when}"
    early = [t for t in when if t < DEADLINE * 0.6]
    at_deadline = [t for t in when if t >= DEADLINE * 0.6]
    if listener == "hub":  # gRPC owns its accept loop: the deadline, but no per-IP cap
        assert len(at_deadline) == n, when
    else:
        # PER_IP of them wait for their token until the deadline; the rest are turned away
        # on arrival.
        assert len(at_deadline) == PER_IP, when
        assert len(early) == n - PER_IP, when
    assert max(when) < DEADLINE + 5
    if listener == "gcs":
        log = _log(cluster, "gcs_server.log")
        assert "no token within the deadline" in log
        assert "too many unauthenticated connections from one address" in log
    # Once they are gone, a peer with the token is let in as before.
    assert cluster.gcs_call("ping") == "pong"


def test_a_slow_stranger_cannot_stretch_the_deadline(limited):
    """One byte of the token frame at a time, each well within a per-read timeout: the
    deadline counts from the connection, not from the last byte."""
    _, addresses = limited
    with _connect(addresses["data"]) as s:
        start = time.monotonic()
        frame = struct.pack("<I", 64) + b"EMBER-AUTH1"
        closed = False
        for b in frame:
            try:
                s.sendall(bytes([b]))
            except OSError:
                closed = True
                break
            if _closed_at([s], 0.4)[0] is not None:
                closed = True
                break
        while not closed and time.monotonic() - start < DEADLINE + 5:
            closed = _closed_at([s], 0.5)[0] is not None
        assert closed
        assert time.monotonic() - start < DEADLINE + 3
