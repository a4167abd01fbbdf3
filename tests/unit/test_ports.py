"""``ember.tools.ports.free_port``: a port outside the kernel's ephemeral range (which any
process's outgoing connection may take at any moment) that no address holds."""

from __future__ import annotations

import socket
from pathlib import Path

from ember.tools import ports


def _first_ephemeral() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_a_free_port_is_below_the_ephemeral_range_and_listens_on_any_loopback_address():
    for _ in range(20):
        port = ports.free_port()
        assert ports.LOWEST <= port < _first_ephemeral()
        for host in ("127.0.0.1", "127.0.0.2"):
            with socket.socket() as s:
                s.bind((host, port))
                s.listen()


def test_a_port_held_on_another_address_is_never_chosen(monkeypatch):
    held = socket.socket()
    held.bind(("127.0.0.2", 0))
    held.listen()
    port = held.getsockname()[1]
    offered = [port, port]  # offered first, twice; then ports as usual
    randint = ports.random.randint
    monkeypatch.setattr(
        ports.random, "randint", lambda low, high: offered.pop() if offered else randint(low, high)
    )
    try:
        assert ports.free_port() != port  # a bind to 127.0.0.1 alone would have allowed it
        assert not offered
    finally:
        held.close()
