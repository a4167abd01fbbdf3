"""Nodes with different IP addresses: the head and a worker node in two network namespaces
joined by a veth pair (issue 3 §7), started with ``ember start`` as on two machines."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest
from ember.session import DEFAULT_TEMP_DIR
from ember.session_processes import find_ember_processes
from ember_test_utils import dashboard_url_in

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


def in_ns(
    ns: str, *cmd: str, timeout: float = 90, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, timeout=timeout, env=env
    )


# Run inside a namespace: the listening TCP sockets of the Ember processes under a temp dir.
# (psutil reads /proc/net of the namespace it runs in, so it must run there.)
LISTENERS = textwrap.dedent(
    """
    import json, sys, psutil
    from ember.session_processes import find_ember_processes, module_of
    rows = []
    for p in find_ember_processes(sys.argv[1]):
        try:
            conns = p.net_connections("inet")
            module = module_of(p.cmdline())
        except psutil.Error:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                rows.append([module, c.laddr.ip.removeprefix("::ffff:"), c.laddr.port])
    print(json.dumps(rows))
    """
)

# Run in the head's namespace: polls the dashboard (HTTP on the head's loopback) until the
# node at IP sys.argv[2] is ALIVE with metrics its agent streamed from the other namespace.
DASHBOARD_SEES = textwrap.dedent(
    """
    import json, sys, time, urllib.request
    url, ip = sys.argv[1], sys.argv[2]
    def get(path):
        with urllib.request.urlopen(url + path, timeout=10) as r:
            return json.loads(r.read())
    deadline = time.monotonic() + 60
    while True:
        nodes = get("/api/nodes")["items"]
        row = next((n for n in nodes if n["node_ip"] == ip and n["state"] == "ALIVE"), None)
        if row is not None and row["mem_used_bytes"]:
            detail = get("/api/nodes/" + row["node_id"])
            if detail["metrics"].get("mem_total_bytes"):
                break
        if time.monotonic() > deadline:
            sys.exit(f"no metrics from the node at {ip} within 60 s: {nodes}")
        time.sleep(0.5)
    print(json.dumps({"nodes": nodes, "node": detail}))
    """
)

# Run in the worker's namespace (another host): streams to the hub without the token.
HUB_PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hub_probe.py")


def _listeners(ns: str, temp_dir: str) -> list[list]:
    out = in_ns(ns, sys.executable, "-c", LISTENERS, temp_dir)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


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
        # Joining from another host without the token: a clear error, and nothing starts. The
        # namespaces share this machine's files, so a private mount namespace hides the head's
        # note in DEFAULT_TEMP_DIR/heads, as another machine's disk would.
        no_token = in_ns(
            ns_b,
            "unshare",
            "--mount",
            "sh",
            "-c",
            f'mkdir -p {DEFAULT_TEMP_DIR} && mount -t tmpfs none {DEFAULT_TEMP_DIR} && exec "$@"',
            "sh",
            EMBER,
            "start",
            f"--address={ip_a}:6380",
            "--temp-dir",
            f"{root}/no-token",
            *store,
            env={k: v for k, v in os.environ.items() if k != "EMBER_TOKEN"},
        )
        assert no_token.returncode == 1, no_token.stdout + no_token.stderr
        assert "needs the cluster token: pass --token or set EMBER_TOKEN" in no_token.stderr
        assert no_token.stderr.count("\n") == 1
        assert not find_ember_processes(f"{root}/no-token")
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
        # The worker's agent reached the head's dashboard across the link (it once dialled
        # its own loopback): the head's dashboard lists that node, alive, with its metrics.
        dashboard_url = dashboard_url_in(head.stdout)
        seen = in_ns(ns_a, sys.executable, "-c", DASHBOARD_SEES, dashboard_url, ip_b, timeout=120)
        assert seen.returncode == 0, seen.stderr
        seen = json.loads(seen.stdout)
        assert seen["node"]["node_ip"] == ip_b and not seen["node"]["is_head"]
        assert seen["node"]["metrics"]["mem_total_bytes"] > 0
        assert {n["node_ip"] for n in seen["nodes"]} == {ip_a, ip_b}
        # From the other host, a stream without the token (or with a wrong one) is refused.
        hub = in_ns(ns_b, sys.executable, HUB_PROBE, f"tcp:{ip_a}:6380", token)
        assert hub.returncode == 0, hub.stderr
        hub = json.loads(hub.stdout)
        assert hub["address"].startswith(f"{ip_a}:")
        assert hub["none"].startswith("UNAUTHENTICATED") and "token" in hub["none"]
        assert hub["wrong"].startswith("UNAUTHENTICATED")
        again = in_ns(ns_a, sys.executable, "-c", DASHBOARD_SEES, dashboard_url, ip_b)
        assert "6.6.6.6" not in again.stdout and "1badc0de" not in again.stdout  # never ingested
        # Every listener binds its node's IP and, at the same port, loopback (the head's
        # dashboard's HTTP port: loopback only); never 0.0.0.0 or another IP.
        dashboard_port = int(dashboard_url.rsplit(":", 1)[1].split("/")[0])
        head_listens = _listeners(ns_a, f"{root}/a")
        assert {ip for _, ip, _ in head_listens} == {ip_a, "127.0.0.1"}, head_listens
        on_loopback = {(m, port) for m, ip, port in head_listens if ip == "127.0.0.1"}
        on_node_ip = {(m, port) for m, ip, port in head_listens if ip == ip_a}
        assert on_loopback == on_node_ip | {("ember.dashboard.server", dashboard_port)}
        hub_port = int(hub["address"].rsplit(":", 1)[1])
        assert ["ember.dashboard.server", ip_a, hub_port] in head_listens
        assert ["ember.gcs.server", ip_a, 6380] in head_listens
        worker_listens = _listeners(ns_b, f"{root}/b")
        assert {ip for _, ip, _ in worker_listens} == {ip_b, "127.0.0.1"}, worker_listens
        assert {(m, p) for m, ip, p in worker_listens if ip == ip_b} == {
            (m, p) for m, ip, p in worker_listens if ip == "127.0.0.1"
        }
    finally:
        subprocess.run(
            [EMBER, "stop", "--force", "--temp-dir", root], capture_output=True, timeout=60
        )
        assert not find_ember_processes(root)
        shutil.rmtree(root, ignore_errors=True)
