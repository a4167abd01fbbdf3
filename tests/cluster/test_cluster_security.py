"""Security (issue 3 §6): the cluster token guards every TCP listener; wrong or missing tokens
are refused with a clear message and nothing they sent runs; listeners bind the node IP."""

from __future__ import annotations

import os
import pickle
import socket
import stat
import struct

import psutil
import pytest
from ember.cluster_token import new_token
from ember.protocol import connection as conn_mod
from ember_test_utils import wait_until


def _raw_send(address: str, frames: list[bytes]) -> bytes:
    """Sends frames on a plain socket; returns what the listener answered before closing."""
    host, port = address[len("tcp:") :].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        for f in frames:
            s.sendall(struct.pack("<I", len(f)) + f)
        s.settimeout(5)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def _kv_put_request(key: bytes) -> bytes:
    return pickle.dumps((conn_mod.REQUEST, "kv_put", 1, {"key": key, "value": b"pwned"}))


def test_wrong_or_missing_token_is_refused_and_nothing_runs(cluster):
    gcs = cluster.head_node.gcs_address
    # A wrong token, then a request: refused, and the request never ran.
    answer = _raw_send(gcs, [b"EMBER-AUTH1" + new_token(), _kv_put_request(b"k1")])
    assert b"wrong cluster token" in answer
    # No token at all: the first frame (a request) is refused unread.
    answer = _raw_send(gcs, [_kv_put_request(b"k2")])
    assert b"no cluster token sent" in answer
    assert cluster.gcs_call("kv_get", {"key": b"k1"}) is None
    assert cluster.gcs_call("kv_get", {"key": b"k2"}) is None
    # The client library says so clearly.
    loop = conn_mod.new_event_loop()
    try:
        with pytest.raises(conn_mod.AuthenticationError, match="refused the cluster token"):
            loop.run_until_complete(conn_mod.connect(gcs, token=new_token(), timeout=5))
    finally:
        loop.close()
    # The right token works.
    assert cluster.gcs_call("ping") == "pong"


def _raylet_call(address: str, token: bytes, op: str, body: object) -> object:
    loop = conn_mod.new_event_loop()

    async def call() -> object:
        conn = await conn_mod.connect(address, name="raylet", token=token, timeout=5)
        try:
            return await conn.call(op, body, timeout=10)
        finally:
            conn.close()

    try:
        return loop.run_until_complete(call())
    finally:
        loop.close()


def test_raylet_and_data_ports_demand_the_token_too(cluster):
    node = cluster.add_node(num_cpus=1)
    info = next(n for n in cluster.gcs_call("list_nodes") if n["node_id"] == node.node_id)
    raylet = info["tcp_address"]

    def set_resource(name: str) -> bytes:
        body = {"name": name, "capacity": 7.0}
        return pickle.dumps((conn_mod.REQUEST, "set_resource", 1, body))

    # Requests that would add a resource to the node, behind a wrong token and behind none.
    answer = _raw_send(raylet, [b"EMBER-AUTH1" + new_token(), set_resource("pwned1")])
    assert b"wrong cluster token" in answer
    answer = _raw_send(raylet, [set_resource("pwned2")])
    assert b"no cluster token sent" in answer
    # With the token the same request does take effect; the refused ones never ran.
    total, _ = _raylet_call(raylet, cluster.token, "set_resource", {"name": "ok", "capacity": 7.0})
    assert total["ok"] == 7.0
    assert "pwned1" not in total and "pwned2" not in total
    host, port = info["data_address"][4:].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        frame = b"EMBER-AUTH1" + new_token()
        s.sendall(struct.pack("<I", len(frame)) + frame)
        assert s.recv(1) == b"\x00"


def test_token_file_is_private_and_listeners_bind_the_node_ip(cluster):
    node = cluster.add_node(num_cpus=1)
    for n in (cluster.head_node, node):
        mode = stat.S_IMODE(os.stat(n.token_file).st_mode)
        assert mode == 0o600, oct(mode)
    pids = set()
    for n in (cluster.head_node, node):
        for proc in n.procs.values():
            p = psutil.Process(proc.pid)
            pids.add(p.pid)
            pids.update(c.pid for c in p.children(recursive=True))
    listening = [
        c
        for c in psutil.net_connections("inet")
        if c.pid in pids and c.status == psutil.CONN_LISTEN
    ]
    assert listening, "expected TCP listeners (GCS, raylets, workers)"
    # gRPC (the agent stream) binds 127.0.0.1 through a dual-stack socket: ::ffff:127.0.0.1.
    assert {c.laddr.ip.removeprefix("::ffff:") for c in listening} == {"127.0.0.1"}


def test_the_dashboards_agent_hub_demands_the_token_even_on_loopback(cluster):
    """A cluster's hub ingests what agents send as the cluster's state: a stream without the
    token (or with a wrong one) is refused, and its made-up node never shows."""
    import asyncio

    import httpx
    from hub_probe import INTRUDER_NODE, probe

    node = cluster.add_node(num_cpus=1)
    answers = asyncio.run(probe(cluster.head_node.gcs_address, cluster.token))
    assert answers["none"].startswith("UNAUTHENTICATED") and "token" in answers["none"]
    assert answers["wrong"].startswith("UNAUTHENTICATED")
    # The real agents, which have the token, are connected: both nodes show, the intruder not.
    url = cluster.head_node.dashboard_url

    def nodes() -> set[str]:
        return {n["node_id"] for n in httpx.get(f"{url}/api/nodes", timeout=10).json()["items"]}

    want = {cluster.head_node.node_id.hex(), node.node_id.hex()}
    wait_until(lambda: want <= nodes(), timeout=30, message="both nodes' agents connected")
    assert INTRUDER_NODE not in nodes()
