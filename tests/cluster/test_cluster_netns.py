"""Nodes with different IP addresses: the head and a worker node in two network namespaces
joined by a veth pair (issue 3 §7), started with ``ember start`` as on two machines."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest
from ember.cli.stop import find_ember_processes

EMBER = os.path.join(os.path.dirname(sys.executable), "ember")


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_namespaces():
    """Two namespaces, ``a`` (10.X.Y.1) and ``b`` (10.X.Y.2), on one veth link."""
    if shutil.which("ip") is None:
        pytest.skip("the `ip` command (iproute2) is not installed; scripts/dev.sh setup adds it")
    tag = f"{os.getpid() % 10000}{random.randrange(100, 999)}"
    a, b = f"emb{tag}a", f"emb{tag}b"
    probe = _ip("netns", "add", a)
    if probe.returncode != 0:
        pytest.skip(f"this machine forbids network namespaces: {probe.stderr.strip()}")
    subnet = f"10.{random.randrange(1, 250)}.{random.randrange(1, 250)}"
    try:
        steps = [
            ("netns", "add", b),
            ("link", "add", f"v{tag}a", "type", "veth", "peer", "name", f"v{tag}b"),
            ("link", "set", f"v{tag}a", "netns", a),
            ("link", "set", f"v{tag}b", "netns", b),
            ("-n", a, "addr", "add", f"{subnet}.1/24", "dev", f"v{tag}a"),
            ("-n", b, "addr", "add", f"{subnet}.2/24", "dev", f"v{tag}b"),
            ("-n", a, "link", "set", f"v{tag}a", "up"),
            ("-n", b, "link", "set", f"v{tag}b", "up"),
            ("-n", a, "link", "set", "lo", "up"),
            ("-n", b, "link", "set", "lo", "up"),
        ]
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                pytest.fail(f"ip {' '.join(step)}: {done.stderr.strip()}")
        yield {"a": (a, f"{subnet}.1"), "b": (b, f"{subnet}.2")}
    finally:
        _ip("netns", "del", a)
        _ip("netns", "del", b)


def in_ns(ns: str, *cmd: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, timeout=timeout
    )


def test_nodes_in_two_network_namespaces(two_namespaces):
    (ns_a, ip_a), (ns_b, ip_b) = two_namespaces["a"], two_namespaces["b"]
    root = tempfile.mkdtemp(prefix="emb-ns-", dir="/tmp")
    store = ["--object-store-memory", str(128 * 1024**2)]
    # A fixed port is safe here: the namespaces are this test's alone.
    try:
        head = in_ns(
            ns_a,
            EMBER,
            "start",
            "--head",
            "--port",
            "6380",
            "--num-cpus",
            "1",
            "--node-ip-address",
            ip_a,
            "--temp-dir",
            f"{root}/a",
            *store,
        )
        assert head.returncode == 0, head.stderr
        token = head.stdout.split("--token=")[1].split()[0]
        # The worker node is told only the head's address and token, as on another host;
        # its own IP is the one its route to the head uses.
        join = in_ns(
            ns_b,
            EMBER,
            "start",
            f"--address={ip_a}:6380",
            f"--token={token}",
            "--num-cpus",
            "1",
            "--resources",
            '{"nsb": 1}',
            "--temp-dir",
            f"{root}/b",
            *store,
        )
        assert join.returncode == 0, join.stderr
        driver = textwrap.dedent(
            f"""
            import ember, numpy as np
            ember.init(address="{ip_a}:6380", temp_dir="{root}/a")
            ips = {{n["NodeID"]: n["NodeManagerAddress"] for n in ember.nodes()}}
            @ember.remote(resources={{"nsb": 1}})
            def where_and_data():
                return ember.get_runtime_context().get_node_id(), np.arange(2**21)
            node, data = ember.get(where_and_data.remote(), timeout=60)
            @ember.remote(resources={{"nsb": 1}})
            def total(a):
                return int(a.sum())
            sent = np.ones(2**21, dtype=np.int64)
            print(ips[node], int(data.sum()), ember.get(total.remote(sent), timeout=60))
            """
        )
        out = in_ns(ns_a, sys.executable, "-c", driver)
        assert out.returncode == 0, out.stderr
        node_ip, got, sent = out.stdout.split()
        assert node_ip == ip_b  # the task ran on the node in the other namespace
        assert int(got) == (2**21) * (2**21 - 1) // 2  # 16 MiB came back across the link
        assert int(sent) == 2**21  # and 16 MiB went there
        status = in_ns(ns_b, EMBER, "status", f"--address={ip_a}:6380", "--temp-dir", f"{root}/b")
        assert status.returncode == 0, status.stderr
        assert f"({ip_a}, head)" in status.stdout and f"({ip_b})" in status.stdout
    finally:
        subprocess.run(
            [EMBER, "stop", "--force", "--temp-dir", root], capture_output=True, timeout=60
        )
        assert not find_ember_processes(root)
        shutil.rmtree(root, ignore_errors=True)
