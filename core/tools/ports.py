"""A TCP port for a server a tool or test is about to start.

Not ``bind(("127.0.0.1", 0))``'s port: the kernel hands ports of its ephemeral range to any
process's next outgoing connection or bind to port 0 (a node's own sockets included), so
one chosen that way can be taken in the moment before the server listens on it. This picks
at random below that range, where only an explicit bind takes a port, and checks that no
address holds it now; random, so parallel test workers pick apart.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 10000


def free_port() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        first_ephemeral = int(text.split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32768
    high = max(first_ephemeral - 1, LOWEST + 1)
    for _ in range(200):
        port = random.randint(LOWEST, high)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))  # fails if any address has the port
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {LOWEST}-{high}")
