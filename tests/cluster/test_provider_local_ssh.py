"""The ``local`` node provider against real OpenSSH servers: two hosts (network namespaces,
each with its own address and ``sshd``, key-only login), a head on this machine's end of
their bridge, and the autoscaler (``python -m ember.autoscaler.monitor``) with
``provider: {type: local}``. A task needing 2 CPUs (the head has none) makes the autoscaler
start a node on a host over SSH; the node joins, runs it, and is stopped when idle. A host
whose sshd is down is a clear provider error, retried until the host is back, never a hang."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from autoscaler_process import EMBER, Monitor, start_driver, start_head
from ember.autoscaler.command_runner import CommandError, SSHCommandRunner
from ember.autoscaler.providers.local import LocalNodeProvider
from ember.session_processes import find_ember_processes
from ember_test_utils import wait_until
from ssh_hosts import ssh_hosts


@pytest.fixture(scope="module")
def hosts():
    yield from ssh_hosts(2)


@pytest.fixture(scope="module")
def head(hosts):
    """A head with no CPUs on the bridge's address; yields (GCS address, token)."""
    gcs, token = start_head(f"{hosts.root}/hd", hosts.head_ip)
    try:
        yield gcs, token
    finally:
        subprocess.run(
            [EMBER, "stop", "--force", "--temp-dir", hosts.root], capture_output=True, timeout=90
        )
        assert not find_ember_processes(hosts.root)


def _config(hosts, gcs: str, worker_ips: list[str], name: str) -> dict:
    return {
        "cluster_name": name,
        "max_workers": 2,
        "idle_timeout_minutes": 0.1,  # 6 s: the node goes soon after its task
        "provider": {
            "type": "local",
            "head_ip": hosts.head_ip,
            "worker_ips": worker_ips,
            "gcs_address": gcs,
            "ember_command": EMBER,  # the hosts share this machine's disk
            "node_temp_dir": f"{hosts.root}/n",
            "state_path": f"{hosts.root}/{name}-state.json",
            "known_hosts": f"{hosts.root}/known_hosts",
        },
        "auth": {"ssh_user": "root", "ssh_private_key": hosts.key},
        "available_node_types": {
            "head": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            # One at most: the test knows which host runs the node by the task's answer.
            "worker": {"resources": {"CPU": 2}, "node_config": {}, "max_workers": 1},
        },
        "head_node_type": "head",
    }


def _state(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def test_a_task_needing_2_cpus_starts_a_node_over_ssh_which_goes_when_idle(hosts, head) -> None:
    gcs, token = head
    config = _config(hosts, gcs, list(hosts.hosts), "sa")
    monitor = Monitor(hosts.root, config, token)
    try:
        driver = start_driver(gcs, token)
        out, err = driver.communicate(timeout=240)
        assert driver.returncode == 0, f"{err}\n--- autoscaler:\n{monitor.log()}"
        ran = json.loads(out)
        assert ran["ip"] in hosts.hosts  # on one of the SSH hosts, at its own address
        # The head's table says which host runs the node, with its type.
        state = _state(config["provider"]["state_path"])
        assert list(state) == [ran["ip"]]
        assert state[ran["ip"]]["tags"]["ember-user-node-type"] == "worker"
        node_dir = f"{hosts.root}/n/sa-{ran['ip']}"
        assert state[ran["ip"]]["node_dir"] == node_dir
        # A restarted autoscaler's provider reads the same: the host is busy, with its type.
        again = LocalNodeProvider({**config["provider"], "auth": config["auth"]}, "sa")
        assert again.non_terminated_nodes({"ember-user-node-type": "worker"}) == [ran["ip"]]
        assert find_ember_processes(node_dir), "no node processes under its directory"
        # The token never appears on a command line, on either side of ssh.
        for proc in find_ember_processes(node_dir):
            assert token not in " ".join(proc.cmdline())
        # Idle: stopped exactly (its processes gone), forgotten by the table.
        wait_until(
            lambda: _state(config["provider"]["state_path"]) == {},
            timeout=90,
            interval=0.5,
            message=f"the idle node was not terminated:\n{monitor.log()}",
        )
        assert find_ember_processes(node_dir) == []
        assert find_ember_processes(f"{hosts.root}/hd"), "the head must be untouched"
    finally:
        monitor.stop()


def test_a_host_that_is_down_is_a_clear_error_retried_until_it_is_back(hosts, head) -> None:
    gcs, token = head
    down = list(hosts.hosts)[1]
    hosts.stop_sshd(down)
    provider_config = {**_config(hosts, gcs, [down], "sd")["provider"]}
    provider_config["auth"] = {"ssh_user": "root", "ssh_private_key": hosts.key}
    provider_config["token"] = token
    provider = LocalNodeProvider(provider_config, "sd")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        provider.create_node_with_resources_and_labels(
            {}, {"ember-user-node-type": "worker"}, 1, {"CPU": 2}, {}
        )
    assert time.monotonic() - t0 < 30  # connection refused: fast, never a hang
    message = str(info.value)
    assert f"{down}: " in message and "ssh could not reach or log in" in message
    assert "Connection refused" in message
    assert provider.non_terminated_nodes({}) == []  # nothing recorded for a failed start

    # A host that does not answer at all (no machine at the address) fails by ConnectTimeout.
    silent = f"{hosts.subnet}.250"
    provider_config["worker_ips"] = [silent]
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=silent):
        LocalNodeProvider(provider_config, "sd").create_node({}, {}, 1)
    assert time.monotonic() - t0 < 40

    # Through the autoscaler: the error is logged and retried each tick; the host comes back.
    monitor = Monitor(hosts.root, _config(hosts, gcs, [down], "sd"), token)
    driver = start_driver(gcs, token)
    try:
        wait_until(
            lambda: monitor.log().count(f"local provider: {down}: ") >= 2,
            timeout=60,
            interval=0.5,
            message=f"no retried provider error:\n{monitor.log()}",
        )
        assert monitor.proc.poll() is None  # still running: an error is not a crash
        hosts.start_sshd(down)
        out, err = driver.communicate(timeout=240)
        assert driver.returncode == 0, f"{err}\n--- autoscaler:\n{monitor.log()}"
        assert json.loads(out)["ip"] == down
    finally:
        monitor.stop()
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        provider = LocalNodeProvider({**provider_config, "worker_ips": [down]}, "sd")
        for node_id in provider.non_terminated_nodes({}):
            provider.terminate_node(node_id)


# A TCP server on the host's own loopback, reachable only through a tunnel. It greets every
# connection (port_forward's own readiness probe is one).
BANNER_SERVER = textwrap.dedent(
    """
    import socket, sys
    s = socket.create_server(("127.0.0.1", int(sys.argv[1])))
    print("listening", flush=True)
    while True:
        conn, _ = s.accept()
        conn.sendall(b"hello from the host")
        conn.close()
    """
)


def test_the_ssh_command_runner_quotes_copies_and_forwards(hosts) -> None:
    ip, ns = next(iter(hosts.hosts.items()))
    runner = SSHCommandRunner(ip, "root", hosts.key, known_hosts=f"{hosts.root}/known_hosts")
    # An argument list arrives word for word: nothing expanded by the remote shell.
    words = ["a b", "$HOME", "'q'", "`id`", "x;y", ""]
    out = runner.run(["printf", "[%s]\\n", *words], timeout=60)
    assert out.stdout.splitlines() == [f"[{w}]" for w in words]
    # Secrets by stdin, plain variables by command line; both in the command's environment.
    out = runner.run(
        ["sh", "-c", 'printf "%s|%s" "$EMBER_TOKEN" "$MODE"'],
        timeout=60,
        env={"MODE": "a b"},
        secret_env={"EMBER_TOKEN": "s3cret value"},
    )
    assert out.stdout == "s3cret value|a b"
    with pytest.raises(CommandError) as info:
        runner.run("echo broken >&2; exit 7", timeout=60, what="a failing setup command")
    assert info.value.returncode == 7 and not info.value.unreachable
    assert str(info.value) == f"{ip}: a failing setup command: exit 7: broken"
    # rsync-up and rsync-down, to a path with a space in it.
    local = f"{hosts.root}/up"
    os.makedirs(local)
    with open(f"{local}/data.txt", "w") as f:
        f.write("payload")
    runner.put(local + "/", f"{hosts.root}/remote dir/", timeout=60)
    runner.get(f"{hosts.root}/remote dir/data.txt", f"{hosts.root}/back.txt", timeout=60)
    with open(f"{hosts.root}/back.txt") as f:
        assert f.read() == "payload"
    # A port on the host's loopback, reached through ssh -L.
    port = 20000 + os.getpid() % 20000
    server = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-c", BANNER_SERVER, str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout.readline().strip() == "listening"
        with runner.port_forward(port, timeout=30) as forward:
            with socket.create_connection(("127.0.0.1", forward.local_port), timeout=10) as c:
                assert c.recv(100) == b"hello from the host"
    finally:
        server.kill()
        server.wait()


def test_a_failing_worker_setup_command_is_a_clear_error_and_no_node_starts(hosts, head) -> None:
    """``worker_setup_commands`` run on the host before its node starts (Ray's updater); one
    that fails names itself and its output, and neither a node nor a table entry is left."""
    gcs, token = head
    host = list(hosts.hosts)[0]
    provider_config = {**_config(hosts, gcs, [host], "sf")["provider"]}
    provider_config["auth"] = {"ssh_user": "root", "ssh_private_key": hosts.key}
    provider_config["token"] = token
    mark = f"{hosts.root}/sf-setup.txt"
    provider_config["worker_setup"] = {
        "file_mounts": {},
        "initialization_commands": [f"echo init > {mark}"],
        "worker_setup_commands": ["echo 'no such package' >&2; exit 7"],
    }
    provider = LocalNodeProvider(provider_config, "sf")
    with pytest.raises(RuntimeError) as info:
        provider.create_node_with_resources_and_labels(
            {}, {"ember-user-node-type": "worker"}, 1, {"CPU": 2}, {}
        )
    message = str(info.value)
    assert "worker_setup_commands[0]" in message and "no such package" in message, message
    with open(mark) as f:
        assert f.read() == "init\n"  # the steps before it ran, on the host
    assert provider.non_terminated_nodes({}) == []
    assert find_ember_processes(f"{hosts.root}/n/sf-{host}") == []
