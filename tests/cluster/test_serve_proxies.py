"""Serve's HTTP proxies on a two-node cluster on this machine (the worker node at
127.0.0.2): Ray 2.x's default ``proxy_location="EveryNode"`` puts a proxy on each node and a
request to the worker node's proxy is answered (and a proxy whose port another process holds
reads UNHEALTHY until the port is let go, then listens); ``HeadOnly`` runs one, on the head;
``Disabled`` none, while handles still work. One cluster for the three (Serve is shut down
and started again between them)."""

from __future__ import annotations

import socket

import ember
import httpx
import pytest
from ember import serve
from ember_test_utils import free_port, wait_until

pytestmark = pytest.mark.timeout(240)


@serve.deployment
def where(request) -> str:
    return "node " + ember.get_runtime_context().get_node_id()


def _answers(ip: str, port: int) -> str | None:
    try:
        r = httpx.get(f"http://{ip}:{port}/where", timeout=10)
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


def _listening(ip: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((ip, port)) == 0


def test_proxy_locations_every_node_head_only_disabled(cluster) -> None:
    worker = cluster.add_node(num_cpus=1, node_ip="127.0.0.2")
    cluster.connect()
    head_id = ember.get_runtime_context().get_node_id()
    worker_id = next(n["NodeID"] for n in ember.nodes() if n["NodeID"] != head_id)
    assert worker.node_ip == "127.0.0.2"
    port = free_port()
    # another process holds the port on the worker node's address: that node's proxy is
    # UNHEALTHY (the head's serves), and it listens once the port is let go
    holder = socket.socket()
    holder.bind(("127.0.0.2", port))
    holder.listen()
    try:
        serve.start(http_options={"port": port})  # proxy_location: EveryNode, Ray's default
        serve.run(where.bind(), name="where", route_prefix="/where")
        wait_until(
            lambda: serve.status().proxies == {head_id: "HEALTHY", worker_id: "UNHEALTHY"},
            60,
            interval=0.2,
            message=lambda: f"the worker node's proxy unhealthy: {serve.status().proxies}",
        )
        assert _answers("127.0.0.1", port).startswith("node ")
        holder.close()

        def both() -> dict | None:
            proxies = serve.status().proxies
            return proxies if proxies == {head_id: "HEALTHY", worker_id: "HEALTHY"} else None

        wait_until(both, 60, interval=0.2, message="a healthy proxy on each node")
        # the worker node's proxy routes too (to the replica, wherever it runs)
        head_answer = wait_until(lambda: _answers("127.0.0.1", port), 30, message="head proxy")
        worker_answer = wait_until(
            lambda: _answers("127.0.0.2", port), 30, message="the worker node's proxy answers"
        )
        assert head_answer == worker_answer and head_answer.startswith("node ")
        serve.shutdown()
        wait_until(
            lambda: not _listening("127.0.0.1", port) and not _listening("127.0.0.2", port),
            30,
            message="both proxies stopped",
        )

        serve.start(http_options={"port": port}, proxy_location="HeadOnly")
        serve.run(where.bind(), name="where", route_prefix="/where")
        assert serve.status().proxies == {head_id: "HEALTHY"}
        assert _answers("127.0.0.1", port).startswith("node ")
        assert not _listening("127.0.0.2", port)
        serve.shutdown()

        serve.start(http_options={"port": port}, proxy_location="Disabled")
        handle = serve.run(where.bind(), name="where", route_prefix="/where")
        assert serve.status().proxies == {}
        assert handle.remote(None).result().startswith("node ")
        assert not _listening("127.0.0.1", port)
        with pytest.raises(ValueError, match="proxy_location must be one of EveryNode"):
            serve.start(proxy_location="Everywhere")
    finally:
        holder.close()
        serve.shutdown()
