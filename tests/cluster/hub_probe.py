"""Knocks on the dashboard's agent hub without the cluster token, as an intruder would.

``probe(gcs_address, token)`` finds the hub's address in the GCS KV (with the token, as a
node would), then opens one stream with no token and one with a wrong token, each sending an
agent's ``hello`` for a made-up node; it returns how the hub answered each. Run as a script
(``python hub_probe.py GCS TOKEN``) it prints that as JSON, for tests that probe from another
network namespace.
"""

from __future__ import annotations

import asyncio
import json
import sys

import grpc
from ember.agent import wire
from ember.protocol import connection as conn_mod

INTRUDER_NODE = "1badc0de" * 4
INTRUDER_IP = "6.6.6.6"
VERDICT_WAIT = 3.0  # seconds: a refusing hub answers on the metadata at once


async def hub_address(gcs_address: str, token: bytes) -> str:
    conn = await conn_mod.connect(gcs_address, name="gcs", token=token, timeout=10)
    try:
        value = await conn.call(
            "kv_get", {"namespace": "dashboard", "key": b"agent_address"}, timeout=10
        )
    finally:
        conn.close()
    return value.decode()


async def attempt(address: str, metadata: tuple | None) -> str:
    """``ANSWERED`` if the hub kept the stream open, else its status code and message.

    The hub judges the token from the call's metadata, before any message, so the probe
    first waits for its verdict: a write racing the hub's abort can make gRPC's asyncio
    client report ``INTERNAL: Internal error from Core`` in place of the server's status
    (grpc/grpc#36066). A stream still open after that wait was let in, and gets the
    intruder's hello."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(wire.METHOD)(metadata=metadata, timeout=10)
        hello = {"type": "hello", "node_id": INTRUDER_NODE, "info": {"node_ip": INTRUDER_IP}}
        try:
            try:
                code = await asyncio.wait_for(asyncio.shield(call.code()), VERDICT_WAIT)
                return f"{code.name}: {await call.details()}"
            except TimeoutError:
                pass  # no verdict: the hub kept the stream open
            await call.write(wire.encode(hello))
            async for _ in call:
                return "ANSWERED"
            code = await call.code()
            return f"{code.name}: {await call.details()}"
        except grpc.aio.AioRpcError as e:
            return f"{e.code().name}: {e.details()}"


async def probe(gcs_address: str, token: bytes) -> dict[str, str]:
    address = await hub_address(gcs_address, token)
    return {
        "address": address,
        "none": await attempt(address, None),
        "wrong": await attempt(address, ((wire.TOKEN_KEY, "0" * 64),)),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(probe(sys.argv[1], sys.argv[2].encode()))))
