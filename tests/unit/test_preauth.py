"""The pre-authentication guard on its own, and a TCP listener in this process: strangers take
a slot of their IP until their token is accepted, every refusal is counted, and the listener's
``on_connect`` sees only peers that presented the token."""

from __future__ import annotations

import asyncio

from ember.protocol import connection as conn_mod
from ember.protocol import preauth
from ember.protocol.preauth import PreAuthGuard


def test_slots_per_ip_and_listener_and_counted_refusals():
    guard = PreAuthGuard(deadline=1.0, per_ip=2)
    assert guard.admit("gcs", "10.0.0.9") and guard.admit("gcs", "10.0.0.9")
    assert not guard.admit("gcs", "10.0.0.9")
    assert guard.admit("gcs", "10.0.0.8")  # another address has its own slots
    assert guard.admit("raylet", "10.0.0.9")  # and so has another listener
    guard.release("gcs", "10.0.0.9")
    assert guard.admit("gcs", "10.0.0.9")
    for _ in range(3):
        guard.refuse("gcs", ("10.0.0.9", 1), preauth.PER_IP)
    assert guard.refused[preauth.PER_IP] == 3


def test_on_connect_runs_only_once_the_token_is_accepted():
    token = b"ab" * 32

    async def main() -> tuple[int, int, int]:
        seen: list[conn_mod.Connection] = []
        server, address = await conn_mod.serve(
            "tcp:127.0.0.1:0",
            {"ping": lambda c, b: "pong"},
            name="probe",
            on_connect=seen.append,
            token=token,
        )
        try:
            host, port = address[4:].rsplit(":", 1)
            _, stranger = await asyncio.open_connection(host, int(port))
            await asyncio.sleep(0.2)
            before = len(seen)
            client = await conn_mod.connect(address, token=token, timeout=5)
            after = len(seen)
            assert await client.call("ping", None, timeout=5) == "pong"
            held = preauth.GUARD.pending("probe", "127.0.0.1")
            client.close()
            stranger.close()
            return before, after, held
        finally:
            server.close()

    loop = conn_mod.new_event_loop()
    try:
        before, after, held = loop.run_until_complete(main())
    finally:
        loop.close()
    assert (before, after) == (0, 1)
    assert held == 1  # the stranger's slot; the client's was released when it authenticated
