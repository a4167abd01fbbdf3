"""Another host, for the tests of reaching a cluster from off the head (test_cli_reach.py,
test_remote_browser.py): a network namespace ``b`` joined by a veth pair, and a head
(``ember start --head``) on the root namespace's end of it with its dashboard on every
interface, so it wants the cluster token. A driver runs a task, holds an object and two named
actors (one detached, for ``kill-actor``) until the module's tests end.

Import the fixtures into a test module: ``from remote_host import other_host, remote_head``.
``in_other_host`` runs a command there with a private mount namespace hiding this machine's
session notes in the default temp dir, as another host's disk would."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import urllib.request

import pytest
from ember.session import DEFAULT_TEMP_DIR
from ember.session_processes import find_ember_processes
from ember_test_utils import dashboard_url_in, ember_cli, free_port, wait_until

EMBER = ember_cli()
PROBE = "reach_probe"  # the task the workload runs, looked for in the commands' output
HOLDER = "ReachHolder"  # an actor class, alive while the module runs
VICTIM = "reach_victim"  # a detached actor's name, for kill-actor
WORKLOAD_TASKS = 5  # the probe, two actors' creations and a ping each


def _tasks_seen(url: str, token: str) -> int:
    """The dashboard's task count, read as a remote client would (the token's header)."""
    req = urllib.request.Request(
        f"{url}/api/tasks?limit=1", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return int(json.load(r)["total"])


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def other_host():
    """Namespace ``b`` (10.X.Y.2) joined to this one (10.X.Y.1) by a veth pair; deleting the
    namespace deletes the pair. Yields (namespace, this end's IP)."""
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("needs `ip` (iproute2) and `unshare` (util-linux)")
    tag = f"{os.getpid() % 10000}{random.randrange(100, 999)}"
    ns = f"emr{tag}"
    probe = _ip("netns", "add", ns)
    if probe.returncode != 0:
        pytest.skip(f"this machine forbids network namespaces: {probe.stderr.strip()}")
    subnet = f"10.{random.randrange(1, 250)}.{random.randrange(1, 250)}"
    try:
        for step in (
            ("link", "add", f"r{tag}h", "type", "veth", "peer", "name", f"r{tag}b"),
            ("link", "set", f"r{tag}b", "netns", ns),
            ("addr", "add", f"{subnet}.1/24", "dev", f"r{tag}h"),
            ("link", "set", f"r{tag}h", "up"),
            ("-n", ns, "addr", "add", f"{subnet}.2/24", "dev", f"r{tag}b"),
            ("-n", ns, "link", "set", f"r{tag}b", "up"),
            ("-n", ns, "link", "set", "lo", "up"),
        ):
            done = _ip(*step)
            if done.returncode != 0:
                pytest.fail(f"ip {' '.join(step)}: {done.stderr.strip()}")
        yield ns, f"{subnet}.1"
    finally:
        _ip("netns", "del", ns)


def in_other_host(
    ns: str, argv: list[str], timeout: float, **kwargs
) -> subprocess.CompletedProcess:
    """``argv`` run in namespace ``ns`` with the default temp dir hidden (a private tmpfs)."""
    hide = f'mkdir -p {DEFAULT_TEMP_DIR} && mount -t tmpfs none {DEFAULT_TEMP_DIR} && exec "$@"'
    return subprocess.run(
        ["ip", "netns", "exec", ns, "unshare", "--mount", "sh", "-c", hide, "sh", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


# A driver that ran PROBE, holds an object and the actors until its stdin closes.
DRIVER = textwrap.dedent(
    f"""
    import sys, ember
    ember.init(address=sys.argv[1])
    @ember.remote
    def {PROBE}():
        return ember.get_runtime_context().get_node_id()
    @ember.remote(num_cpus=0)
    class {HOLDER}:
        def ping(self):
            return "pong"
    node = ember.get({PROBE}.remote(), timeout=60)
    held = ember.put(b"x" * 300_000)
    holder = {HOLDER}.options(name="reach_holder").remote()
    victim = {HOLDER}.options(name="{VICTIM}", lifetime="detached").remote()
    assert ember.get([holder.ping.remote(), victim.ping.remote()], timeout=60) == ["pong"] * 2
    print(node, flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture(scope="module")
def remote_head(other_host):
    """The head on ``other_host``'s IP with the driver's workload; a dict of what tests need."""
    ns, ip = other_host
    root = tempfile.mkdtemp(prefix="emb-reach-", dir="/tmp")  # short: Unix socket paths
    temp_dir = f"{root}/head"
    port = free_port()
    driver = None
    try:
        head = subprocess.run(
            [
                EMBER,
                *("start", "--head", "--port", str(port), "--num-cpus", "1"),
                *("--node-ip-address", ip, "--temp-dir", temp_dir),
                *("--object-store-memory", str(64 * 1024**2)),
                # Every interface, as Ray users open it to other hosts; it then wants the token.
                *("--dashboard-host", "0.0.0.0", "--dashboard-port", "0"),
            ],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert head.returncode == 0, head.stderr
        token = head.stdout.split("--token=")[1].split()[0]
        dash_port = int(dashboard_url_in(head.stdout).rsplit(":", 1)[1])
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, f"{ip}:{port}"],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        node_id = driver.stdout.readline().strip()
        assert len(node_id) == 32, f"the driver failed (exit {driver.poll()})"
        # The tasks' events reach the dashboard a second or two after they end.
        wait_until(
            lambda: _tasks_seen(f"http://{ip}:{dash_port}", token) >= WORKLOAD_TASKS,
            timeout=30,
            interval=0.5,
            message=f"the workload's {WORKLOAD_TASKS} tasks in the dashboard",
        )
        yield {
            "ns": ns,
            "ip": ip,
            "port": port,
            "dash_port": dash_port,
            "token": token,
            "node_id": node_id,
            "driver_pid": driver.pid,
            "temp_dir": temp_dir,
            "root": root,
            "printed": head.stdout,
        }
    finally:
        if driver is not None:
            driver.stdin.close()
            driver.wait(timeout=30)
        subprocess.run(
            [EMBER, "stop", "--force", "--temp-dir", root], capture_output=True, timeout=60
        )
        assert not find_ember_processes(root)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def tcp_forward(listen_ip: str, port: int):
    """What ``ssh -L`` does on the head's side: connections to ``listen_ip``:(a free port)
    are relayed to 127.0.0.1:``port``, so the server sees them arrive on its loopback.
    Yields the port listened on."""
    server = socket.create_server((listen_ip, 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
            upstream.settimeout(None)
            client.settimeout(None)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()
