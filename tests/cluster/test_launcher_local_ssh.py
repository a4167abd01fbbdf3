"""The issue's walk with the ``local`` provider, as a user types it, against two real OpenSSH
hosts (network namespaces, ``ssh_hosts.py``): ``ember up`` starts the head on the first host
over SSH (file_mounts, initialization and setup commands first, in Ray's order); a task
needing more CPUs than the head has makes its autoscaler set up the second host (the same
steps, with the worker's setup commands) and start a worker there over SSH; a changed config reaches the head's autoscaler live; the worker goes when idle;
``exec`` (``--tmux``, ``--port-forward``), ``submit``,
``rsync-up``/``rsync-down``, ``get-head-ip``, ``get-worker-ips``, ``monitor`` and ``dashboard``
(an SSH forward) answer; ``ember down`` leaves no Ember process in either namespace.

One test: every step needs the cluster the step before left."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request

import psutil
import pytest
import yaml
from autoscaler_process import EMBER
from ember.autoscaler import heads
from ember.session_processes import find_ember_processes
from ember_test_utils import wait_until
from launcher_cli import ember, ok
from ssh_hosts import ssh_hosts

WORKLOAD = """
import json, ember
ember.init()

@ember.remote(num_cpus=2)
def where():
    return ember.get_runtime_context().get_node_id()

node = ember.get(where.remote(), timeout=240)
ip = next(n["NodeManagerAddress"] for n in ember.nodes() if n["NodeID"] == node)
print("ran on", ip)
"""


@pytest.fixture(scope="module")
def hosts():
    yield from ssh_hosts(2)


def _ember_pids_in(namespace: str) -> list[str]:
    """The Ember processes running in a network namespace (sshd and its sessions aside)."""
    done = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30
    )
    found = []
    for pid in done.stdout.split():
        try:
            cmd = " ".join(psutil.Process(int(pid)).cmdline())
        except psutil.Error:
            continue
        if "ember" in cmd and "sshd" not in cmd:
            found.append(f"{pid}: {cmd[:200]}")
    return found


def _greeting(port: int) -> bytes:
    """What a server behind this machine's ``port`` says (b"" while nothing answers)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            return c.recv(100)
    except OSError:
        return b""


def _config(hosts, name: str, worker_ips: list[str]) -> dict:
    """The cluster.yaml of these tests: the first host the head (1 CPU), ``worker_ips`` the
    worker hosts (2 CPUs each, one at most)."""
    root = hosts.root
    return {
        "cluster_name": name,
        "max_workers": 1,
        "idle_timeout_minutes": 0.1,  # 6 s: the worker goes soon after its task
        "provider": {
            "type": "local",
            "head_ip": next(iter(hosts.hosts)),
            "worker_ips": worker_ips,
            "ember_command": EMBER,  # the hosts share this machine's disk
            "node_temp_dir": f"{root}/n",
            "state_path": f"{root}/state.json",
            "known_hosts": f"{root}/known_hosts",
        },
        "auth": {"ssh_user": "root", "ssh_private_key": hosts.key},
        "available_node_types": {
            "head": {
                "resources": {"CPU": 1, "object_store_memory": 64 * 1024**2},
                "node_config": {},
                "max_workers": 0,
            },
            "worker": {"resources": {"CPU": 2}, "node_config": {}, "max_workers": 1},
        },
        "head_node_type": "head",
    }


def test_up_on_ssh_hosts_scale_up_shrink_down(hosts, tmp_path, monkeypatch) -> None:
    up_dir = tempfile.mkdtemp(prefix="eu-", dir="/tmp")
    monkeypatch.setenv("EMBER_UP_DIR", up_dir)  # this process's heads.* calls too
    env = dict(os.environ)
    (head_ip, head_ns), (worker_ip, worker_ns) = hosts.hosts.items()
    root = hosts.root
    mounted = tmp_path / "mount"
    mounted.mkdir()
    (mounted / "data.txt").write_text("mounted")
    order = f"{root}/order.txt"
    name = f"ssh{os.getpid()}"
    raw = {
        **_config(hosts, name, [worker_ip]),
        "file_mounts": {f"{root}/mnt": str(mounted)},
        # Ray's order: the mounts are there before the first command runs.
        "initialization_commands": [f"cat {root}/mnt/data.txt >> {order}"],
        "setup_commands": [f"echo ' setup' >> {order}"],
        "head_setup_commands": [f"echo ' head' >> {order}"],
        # Run by the head's autoscaler on the worker host, before its node starts there.
        "worker_setup_commands": [
            f"echo \" worker-$(hostname -I | cut -d' ' -f1)-$(ls {root}/n | wc -l)\" >> {order}"
        ],
    }
    config = str(tmp_path / "cluster.yaml")
    with open(config, "w") as f:
        yaml.safe_dump(raw, f)
    try:
        out = ok(ember(env, "up", config, "-y"))
        assert f"Cluster {name} is up: address {head_ip}:6379" in out
        with open(order) as f:
            assert f.read().split() == ["mounted", "setup", "head"]
        head_dir = f"{root}/n/{name[:8]}-{head_ip}"
        assert os.path.exists(f"{head_dir}/cluster.yaml") and os.path.exists(f"{head_dir}/ssh_key")
        with open(f"{head_dir}/cluster.yaml") as f:  # the head's autoscaler logs in by its copy
            assert yaml.safe_load(f)["auth"]["ssh_private_key"] == f"{head_dir}/ssh_key"
        # The head runs in the head host's namespace, with the token nowhere on a command line.
        with open(os.path.join(up_dir, name, "token")) as f:
            token = f.read().strip()
        running = _ember_pids_in(head_ns)
        assert running and not any(token in line for line in running)
        assert _ember_pids_in(worker_ns) == []
        assert "is up to date" in ok(ember(env, "up", config, "-y"))  # idempotent
        assert ok(ember(env, "get-head-ip", config)).strip() == head_ip
        assert ok(ember(env, "get-worker-ips", config)).strip() == ""

        # 2 CPUs of work on a 1-CPU head: the autoscaler starts a node on the worker host.
        script = tmp_path / "workload.py"
        script.write_text(WORKLOAD)
        out = ok(ember(env, "submit", config, str(script), timeout=300))
        assert f"ran on {worker_ip}" in out
        # The worker host was set up first, in Ray's order, in its own namespace (its
        # address), before its node's directory was made (only the head's was there).
        with open(order) as f:
            assert f.read().split() == [
                *["mounted", "setup", "head"],
                *["mounted", "setup", f"worker-{worker_ip}-1"],
            ]
        status = heads.read_status(heads.running_head(config))
        assert [d["node_type"] for d in status["decisions"] if d["action"] == "launch"] == [
            "worker"
        ]
        log = ok(ember(env, "monitor", config, "--no-follow", "--lines", "500"))
        assert "local provider: node started on " + worker_ip in log

        # A changed config is copied to the head, whose autoscaler re-reads it live.
        raw["upscaling_speed"] = 2.0
        with open(config, "w") as f:
            yaml.safe_dump(raw, f)
        assert "the new config reaches its autoscaler" in ok(ember(env, "up", config, "-y"))
        with open(f"{head_dir}/cluster.yaml") as f:
            assert yaml.safe_load(f)["upscaling_speed"] == 2.0
        wait_until(
            lambda: "config reloaded" in ok(ember(env, "monitor", config, "--no-follow")),
            timeout=30,
            interval=0.5,
            message="the head's autoscaler never re-read its changed config",
        )

        # exec runs on the head, in its namespace, with the cluster's address.
        assert ok(ember(env, "exec", config, "echo $EMBER_ADDRESS")).strip() == f"{head_ip}:6379"
        # --port-forward: this machine's port reaches the head's loopback port.
        # (It greets every connection: the forward's own readiness probe is one.)
        probe = (
            "import socket,sys; s=socket.create_server(('127.0.0.1',int(sys.argv[1]))); "
            "print('up',flush=True)\nwhile True:\n c,_=s.accept(); c.sendall(b'via ssh'); c.close()"
        )
        port = 20000 + os.getpid() % 20000
        server = subprocess.Popen(
            ["ip", "netns", "exec", head_ns, sys.executable, "-c", probe, str(port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout.readline().strip() == "up"
            # The forward is up before the command starts, and lasts while it runs.
            execd = subprocess.Popen(
                [sys.executable, "-m", "ember.cli.main", "exec", config, "sleep 4"]
                + ["--port-forward", str(port)],
                env=env,
            )
            try:
                got = wait_until(lambda: _greeting(port), timeout=30, interval=0.2)
                assert got == b"via ssh"
                assert execd.wait(timeout=60) == 0
            finally:
                if execd.poll() is None:
                    execd.terminate()
                    execd.wait(timeout=30)
        finally:
            server.kill()
            server.wait()

        # Files up to the head and back.
        (tmp_path / "up.txt").write_text("payload")
        ok(ember(env, "rsync-up", config, str(tmp_path / "up.txt"), f"{head_dir}/up.txt"))
        ok(ember(env, "rsync-down", config, f"{head_dir}/up.txt", str(tmp_path / "back.txt")))
        assert (tmp_path / "back.txt").read_text() == "payload"

        # The dashboard (on the head's loopback) through an SSH forward, held until ended.
        dash = subprocess.Popen(
            [sys.executable, "-m", "ember.cli.main", "dashboard", config],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            url = dash.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:"), dash.stderr.read() if dash.poll() else url
            with urllib.request.urlopen(f"{url}/api/version", timeout=30) as r:
                assert json.load(r)["session_dir"].startswith(head_dir)
        finally:
            dash.terminate()
            dash.wait(timeout=30)

        if shutil.which("tmux"):  # exec --tmux: detached on the head, ended by ember down
            ok(ember(env, "exec", config, f"echo tmux > {root}/tmux.txt; sleep 600", "--tmux"))
            wait_until(lambda: os.path.exists(f"{root}/tmux.txt"), timeout=30, interval=0.2)

        # Idle past 6 s, the worker goes: its processes stopped over SSH, the table empty.
        wait_until(
            lambda: heads.worker_ips(config) == [],
            timeout=90,
            interval=0.5,
            message="the idle worker was never removed",
        )
        wait_until(lambda: _ember_pids_in(worker_ns) == [], timeout=30, interval=0.5)

        out = ok(ember(env, "down", config, "-y"))
        assert f"Cluster {name} is down" in out
        # (A moment's grace: the last SSH sessions of ``down`` may still be closing.)
        wait_until(
            lambda: _ember_pids_in(head_ns) == [] and _ember_pids_in(worker_ns) == [],
            timeout=15,
            interval=0.2,
            message="Ember processes outlived ember down in the hosts' namespaces",
        )
        assert find_ember_processes(root) == []
        assert not os.path.exists(head_dir)  # the key's copy went with it
        assert "is not running" in ok(ember(env, "down", config, "-y"))  # idempotent
    finally:
        if os.path.isdir(os.path.join(up_dir, name)):
            ember(env, "down", config, "-y")
        subprocess.run(
            [EMBER, "stop", "--force", "--temp-dir", root], capture_output=True, timeout=90
        )
        shutil.rmtree(up_dir, ignore_errors=True)


def test_up_runs_the_configs_own_head_start_commands(hosts, tmp_path, monkeypatch) -> None:
    """Ray's ``head_start_ray_commands``, given: run as written on the head host (here a
    daemonizing ``ember start --head``), with the token, the head's directory and the copied
    config in their environment; ``up`` again finds that head running, ``--restart-only``
    starts it again; ``down`` stops it. And a head this machine cannot reach directly (a
    blackhole route to it here; SSH goes through the other host, ``ssh_proxy_command``):
    its GCS is reached through an SSH forward."""
    up_dir = tempfile.mkdtemp(prefix="eu-", dir="/tmp")
    monkeypatch.setenv("EMBER_UP_DIR", up_dir)
    env = dict(os.environ)
    (head_ip, head_ns), (other_ip, _) = hosts.hosts.items()
    name = f"own{os.getpid()}"
    raw = _config(hosts, name, [])  # Ray's head-only cluster: no worker hosts
    raw["auth"]["ssh_proxy_command"] = shlex.join(
        ["ssh", "-i", hosts.key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new"]
        + ["-o", f"UserKnownHostsFile={hosts.root}/known_hosts", "-W", "%h:%p", f"root@{other_ip}"]
    )
    raw["head_start_ray_commands"] = [
        f"{EMBER} start --head --port=6379 --node-ip-address=$EMBER_HEAD_IP "
        "--temp-dir=$EMBER_TEMP_DIR --autoscaling-config=$EMBER_AUTOSCALING_CONFIG "
        "--num-cpus=1 --object-store-memory=67108864 --include-dashboard=false"
    ]
    config = str(tmp_path / "cluster.yaml")
    with open(config, "w") as f:
        yaml.safe_dump(raw, f)
    blackhole = ["ip", "route", "add", "blackhole", f"{head_ip}/32"]
    subprocess.run(blackhole, check=True, capture_output=True, timeout=30)
    try:
        with pytest.raises(OSError):
            socket.create_connection((head_ip, 22), timeout=5).close()
        assert f"Cluster {name} is up: address {head_ip}:6379" in ok(ember(env, "up", config, "-y"))
        # get-worker-ips and the status record: the GCS through a forward (none: no workers).
        assert ok(ember(env, "get-worker-ips", config)) == ""
        assert heads.read_status(heads.running_head(config))["cluster_name"] == name
        with open(os.path.join(up_dir, name, "token")) as f:
            token = f.read().strip()
        running = _ember_pids_in(head_ns)
        assert running and not any(token in line for line in running)
        assert "is up to date" in ok(ember(env, "up", config, "-y"))
        # --restart-only: the head stopped and started again by the same commands.
        out = ok(ember(env, "up", config, "-y", "--restart-only"))
        assert f"Restarting cluster {name}" in out and f"Cluster {name} is up" in out
        assert not set(_ember_pids_in(head_ns)) & set(running)  # new processes
        assert ok(ember(env, "exec", config, "echo $EMBER_ADDRESS")).strip() == f"{head_ip}:6379"
        assert f"Cluster {name} is down" in ok(ember(env, "down", config, "-y"))
        wait_until(lambda: _ember_pids_in(head_ns) == [], timeout=15, interval=0.2)
    finally:
        if os.path.isdir(os.path.join(up_dir, name)):
            ember(env, "down", config, "-y")
        blackhole[2] = "del"
        subprocess.run(blackhole, capture_output=True, timeout=30)
        shutil.rmtree(up_dir, ignore_errors=True)
