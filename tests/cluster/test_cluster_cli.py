"""``ember start``, ``status`` and ``stop`` run as a user runs them: as subprocesses (issue 3
§1, §2, §7). Every command is scoped to this test's temp dir (other Ember clusters may run on
this machine)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

import psutil
import pytest
from ember.session import DEFAULT_TEMP_DIR
from ember.session_processes import find_ember_processes
from ember_test_utils import dashboard_url_in, ember_cli, free_port, head_cluster, wait_until

EMBER = os.path.join(os.path.dirname(sys.executable), "ember")


def _processes_mentioning(text: str) -> list[str]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if text in cmd and "pytest" not in cmd:
            out.append(cmd[:160])
    return out


def run(*args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [EMBER, *args],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, **(env or {})},
    )
    if check and proc.returncode != 0:
        pytest.fail(f"ember {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def head_args(port: int, temp_dir: str, *extra: str) -> list[str]:
    """``ember start --head`` on loopback with one CPU and a small store, plus ``extra``."""
    return [
        "start",
        "--head",
        "--port",
        str(port),
        "--num-cpus",
        "1",
        "--node-ip-address",
        "127.0.0.1",
        "--temp-dir",
        temp_dir,
        "--object-store-memory",
        str(64 * 1024**2),
        *extra,
    ]


@pytest.fixture
def temp_root():
    root = tempfile.mkdtemp(prefix="emb-cli-", dir="/tmp")  # short: Unix socket paths
    yield root
    run("stop", "--force", "--temp-dir", root, check=False)
    assert not find_ember_processes(root)
    shutil.rmtree(root, ignore_errors=True)


def test_start_status_join_drive_and_stop(temp_root):
    port = free_port()
    address = f"127.0.0.1:{port}"
    common = ["--node-ip-address", "127.0.0.1", "--object-store-memory", str(128 * 1024**2)]
    head = run(*head_args(port, f"{temp_root}/head"))
    assert f"ember start --address='{address}'" in head.stdout
    # Started under a temp dir of its own, the next steps name this cluster (issue 28).
    assert f"ember.init(address='{address}')" in head.stdout
    assert f"ember status --address {address} --temp-dir {temp_root}/head" in head.stdout
    # A wrong token is refused, and no node starts.
    bad = run(
        "start",
        "--address",
        address,
        "--token",
        "ab" * 32,
        "--temp-dir",
        f"{temp_root}/bad",
        *common,
        check=False,
    )
    assert bad.returncode == 1
    assert "refused the cluster token" in bad.stderr
    assert not find_ember_processes(f"{temp_root}/bad")
    # On the same machine the token is found automatically.
    run(
        "start",
        "--address",
        address,
        "--num-cpus",
        "2",
        "--resources",
        '{"accel": 1}',
        "--temp-dir",
        f"{temp_root}/worker",
        *common,
    )
    status = run("status", "--address", address, "--temp-dir", f"{temp_root}/head")
    assert status.stdout.count(" 1 node_") == 2
    assert "0.0/3.0 CPU" in status.stdout
    assert "0.0/1.0 accel" in status.stdout
    # A driver connects with address="auto", runs on both nodes, and leaves the cluster up.
    driver = textwrap.dedent(
        f"""
        import ember
        ember.init(address="auto", temp_dir={temp_root + "/head"!r})
        @ember.remote(resources={{"accel": 1}})
        def f():
            return ember.get_runtime_context().get_node_id()
        print(len(ember.nodes()), ember.get(f.remote(), timeout=60))
        """
    )
    out = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "2"
    # EMBER_ADDRESS names the cluster for init() without an address.
    by_env = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import ember; ember.init(temp_dir={temp_root + '/worker'!r}); "
            "print(ember.get_runtime_context().get_node_id(), len(ember.nodes()))",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "EMBER_ADDRESS": address},
    )
    assert by_env.returncode == 0, by_env.stderr
    assert by_env.stdout.split()[1] == "2"
    summary = json.loads(
        run(
            "status", "--address", address, "--format", "json", "--temp-dir", f"{temp_root}/head"
        ).stdout
    )
    assert len(summary["active_nodes"]) == 2
    assert summary["usage"]["CPU"] == {"used": 0.0, "total": 3.0}
    # Per node, the same shape as cluster-wide.
    per_node = {n["node_ip"] + str(n["is_head"]): n["usage"] for n in summary["active_nodes"]}
    assert per_node["127.0.0.1False"]["CPU"] == {"used": 0.0, "total": 2.0}
    assert per_node["127.0.0.1True"]["CPU"] == {"used": 0.0, "total": 1.0}
    assert all(set(use) == {"used", "total"} for n in per_node.values() for use in n.values())
    assert out.stdout.split()[1] in {n["node_id"] for n in summary["active_nodes"]}
    # Stop: everything of this temp dir goes; a second stop has nothing to do.
    stopped = run("stop", "--temp-dir", temp_root)
    assert "Stopped" in stopped.stdout
    assert not find_ember_processes(temp_root)
    # Seen independently of find_ember_processes: no process of this cluster is left at all
    # (the agent's supervisor, which runs as a file, once was).
    wait_until(
        lambda: not _processes_mentioning(temp_root),
        timeout=10,
        message=f"no process of {temp_root} left after ember stop",
    )
    again = run("stop", "--temp-dir", temp_root)
    assert "No Ember processes" in again.stdout
    for _ in range(2):  # --force with nothing left: idempotent too
        forced = run("stop", "--force", "--temp-dir", temp_root)
        assert forced.returncode == 0 and "No Ember processes to stop" in forced.stdout
    gone = run("status", "--address", address, check=False)
    assert gone.returncode == 1
    assert gone.stderr.count("\n") == 1 and address in gone.stderr


def _read_until(proc: subprocess.Popen, text: str, timeout: float) -> str:
    """What ``proc`` printed, up to the line containing ``text``; fails at the deadline."""
    import select
    import time

    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            pytest.fail(f"no {text!r} from ember start within {timeout} s; it printed:\n{seen}")
        # Straight from the pipe: a buffered reader would hide what it read ahead from select.
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.5))
        if ready:
            seen += os.read(proc.stdout.fileno(), 65536).decode(errors="replace")
    return seen


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_block_stays_in_the_foreground_until_sigterm_or_ctrl_c(temp_root, sig):
    port = free_port()
    proc = subprocess.Popen(
        [EMBER, *head_args(port, temp_root, "--block")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # It says so once its signal handlers are in place; only then is a signal its to handle.
        _read_until(proc, "--block: staying in the foreground", timeout=60)
        status = run("status", "--address", f"127.0.0.1:{port}", "--temp-dir", temp_root)
        assert " 1 node_" in status.stdout
        assert proc.poll() is None
        proc.send_signal(sig)
        assert proc.wait(30) == 0
        assert f"Stopping the node ({sig.name})" in proc.stdout.read()
        assert not find_ember_processes(temp_root)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_start_gpus_memory_and_no_dashboard(temp_root):
    port = free_port()
    head = run(
        *head_args(
            port,
            temp_root,
            "--num-gpus",
            "2",
            "--memory",
            str(500 * 1024**2),
            "--include-dashboard",
            "false",
        )
    )
    assert "Dashboard" not in head.stdout
    summary = json.loads(run("status", "--address", f"127.0.0.1:{port}", "--format", "json").stdout)
    assert summary["usage"]["GPU"] == {"used": 0.0, "total": 2.0}
    assert summary["usage"]["memory"] == {"used": 0.0, "total": float(500 * 1024**2)}
    assert summary["dashboard_url"] == ""
    modules = {" ".join(p.cmdline()) for p in find_ember_processes(temp_root)}
    assert not any("ember.dashboard.server" in m for m in modules)
    assert any("ember.agent " in m for m in modules)  # agents: every node


def test_dashboard_host_port_taken_and_url_prefix(temp_root):
    """--dashboard-port taken: the next free port, and `ember start` says so. --dashboard-host
    off loopback: the token is required. --dashboard-url-prefix: the API and app under it."""
    import httpx
    from ember.node import node_ip_for

    host = node_ip_for()  # this machine's address on its network, when it has one
    held = socket.socket()
    held.bind((host, 0))
    held.listen(1)
    taken = held.getsockname()[1]
    try:
        head = run(
            *head_args(
                free_port(),
                temp_root,
                "--dashboard-host",
                host,
                "--dashboard-port",
                str(taken),
                "--dashboard-url-prefix",
                "ember/",
            )
        )
    finally:
        held.close()
    line = next(ln for ln in head.stdout.splitlines() if "Dashboard:" in ln)
    prefix = f"Dashboard: port {taken} is taken; using "
    assert prefix in line, head.stdout
    url = line.split(": ")[-1]
    used = int(line.split(prefix)[1].split(":")[0])
    assert url == f"http://{host}:{used}/ember" and taken < used < taken + 100
    token = head.stdout.split("--token=")[1].split()[0]
    auth = {"Authorization": f"Bearer {token}"}
    if host != "127.0.0.1":  # off loopback the dashboard demands the cluster token
        refused = httpx.get(f"{url}/api/version", timeout=30)
        assert refused.status_code == 401 and "token" in refused.json()["detail"]
    version = httpx.get(f"{url}/api/version", headers=auth, timeout=30)
    assert version.status_code == 200 and version.json()["api"] == 1
    index = httpx.get(f"{url}/", headers=auth, timeout=30)
    assert index.status_code == 200 and "<title>Ember dashboard</title>" in index.text


def test_node_ip_address_of_every_interface_is_refused(temp_root):
    refused = run(
        "start",
        "--head",
        "--node-ip-address",
        "0.0.0.0",
        "--temp-dir",
        temp_root,
        check=False,
    )
    assert refused.returncode == 2
    assert "--node-ip-address" in refused.stderr and "never every interface" in refused.stderr
    assert not find_ember_processes(temp_root)


def test_stop_all_stops_every_ember_process_of_the_user():
    """The unscoped form (``--all``; a plain ``ember stop`` stops only the default temp
    dir's, tests/test_session_commands.py), run where it cannot touch anyone else's
    processes: inside a fresh PID namespace (its own /proc), which holds only this test's
    cluster, with its own /dev/shm and default temp dir (``--all`` clears the arenas and head
    notes of raylets it does not see running, and it sees none of the machine's)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("`unshare` (util-linux) or `ip` (iproute2) is not installed")
    root = tempfile.mkdtemp(prefix="emb-pidns-", dir="/tmp")
    script = textwrap.dedent(
        f"""
        set -e
        mount -t tmpfs none /dev/shm
        mkdir -p {DEFAULT_TEMP_DIR} && mount -t tmpfs none {DEFAULT_TEMP_DIR}
        {EMBER} start --head --port 6390 --num-cpus 1 --node-ip-address 127.0.0.1 \\
            --temp-dir {root}/h --object-store-memory 67108864 >/dev/null
        {EMBER} start --address 127.0.0.1:6390 --num-cpus 1 --node-ip-address 127.0.0.1 \\
            --temp-dir {root}/w --object-store-memory 67108864 >/dev/null
        before=$(ps -eo args | grep -c '[e]mber\\.')
        {EMBER} stop --all
        after=$(ps -eo args | grep -c '[e]mber\\.' || true)
        {EMBER} stop --all
        echo "$before $after"
        """
    )
    try:
        probe = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "--net", "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if probe.returncode != 0:
            pytest.skip(f"this machine forbids PID namespaces: {probe.stderr.strip()}")
        # --net too: port 6390 is then this namespace's alone (loopback must come up first).
        out = subprocess.run(
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                "--net",
                "sh",
                "-c",
                "ip link set lo up && " + script,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        lines = out.stdout.strip().splitlines()
        before, after = map(int, lines[-1].split())
        assert before >= 4  # GCS, two raylets, zygotes, workers
        assert after == 0
        assert "No Ember processes to stop." in out.stdout
    finally:
        assert not find_ember_processes(root)
        shutil.rmtree(root, ignore_errors=True)


def test_status_summary_shapes_and_feasibility_against_live_nodes():
    """Usage has one shape everywhere; task and actor demands print alike; an actor's
    infeasible flag is decided against the nodes alive now, not the GCS's queued reason."""
    from ember.cli.status import render, summarize

    def node(node_id: str, total: dict, avail: dict, demands=()) -> dict:
        return {
            "node_id": node_id,
            "node_ip": "10.0.0.1",
            "state": "ALIVE",
            "resources_total": total,
            "resources_available": avail,
            "pending_demands": list(demands),
        }

    info = {
        "nodes": [
            node("a" * 32, {"CPU": 2.0}, {"CPU": 1.0}, [{"shape": {"CPU": 1.0}, "count": 3}]),
            # This node joined after the actor below was queued as infeasible.
            node("b" * 32, {"CPU": 1.0, "accel": 1.0}, {"CPU": 1.0, "accel": 1.0}),
        ],
        "pending_actors": [
            {
                "class_name": "Stale",
                "reason": "infeasible: no node has {accel: 1}",
                "resources": {"accel": 1, "CPU": 0},
            },
            {"class_name": "Huge", "reason": "waiting", "resources": {"CPU": 64}},
        ],
    }
    summary = summarize(info)
    assert summary["usage"]["CPU"] == {"used": 1.0, "total": 3.0}
    assert summary["active_nodes"][0]["usage"]["CPU"] == {"used": 1.0, "total": 2.0}
    demands = {d.get("actor", "tasks"): d for d in summary["pending_demands"]}
    assert demands["tasks"] == {"shape": {"CPU": 1.0}, "count": 3, "infeasible": False}
    assert demands["Stale"]["shape"] == {"accel": 1.0} and not demands["Stale"]["infeasible"]
    assert demands["Huge"]["shape"] == {"CPU": 64.0} and demands["Huge"]["infeasible"]
    text = render(summary)
    assert " {accel: 1}: 1+ pending actor Stale\n" in text + "\n"
    assert " {CPU: 64}: 1+ pending actor Huge (infeasible" in text
    assert " 1.0/2.0 CPU" in text and " 1.0/3.0 CPU" in text


@pytest.mark.parametrize("host", ["0.0.0.0", ""])
def test_dashboard_on_every_interface_is_said_and_needs_the_token(temp_root, host):
    """The empty host binds every interface as 0.0.0.0 does, so it needs the token as well
    (it was once taken for loopback: the whole API, kill included, open to the network)."""
    import httpx

    head = run(*head_args(free_port(), temp_root, "--dashboard-host", host))
    shown = host or '""'
    assert f"--dashboard-host {shown} listens on every interface" in head.stderr
    url = dashboard_url_in(head.stdout)
    refused = httpx.get(f"{url}/api/version", timeout=30)
    assert refused.status_code == 401
    # The 401 names the token this dashboard wants: the cluster's, which the head printed.
    assert "cluster_token" in refused.text and "dashboard_token" not in refused.text, refused.text
    killed = httpx.post(f"{url}/api/actors/{'0' * 32}/kill", timeout=30)
    assert killed.status_code == 401
    token = head.stdout.split("--token=")[1].split()[0]
    ok = httpx.get(f"{url}/api/version", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert ok.status_code == 200
    if not host:
        return  # the rest is about the port, the same for both hosts
    bad_port = run(*head_args(free_port(), temp_root, "--dashboard-port", "70000"), check=False)
    assert bad_port.returncode == 2 and "--dashboard-port" in bad_port.stderr


def test_stop_removes_what_a_killed_raylet_left_behind():
    """A SIGKILLed raylet runs no clean-up: its arena stays in /dev/shm. ``ember stop``
    removes it, and the head's note in the heads dir (readable by this user only)."""
    from ember.session import _heads_dir, registered_head_session
    from ember.session_processes import module_of

    with head_cluster() as (root, port, _started):
        with open(os.path.join(root, "session_latest", "node.json")) as f:
            node = json.load(f)
        arena, session = node["arena_path"], node["session_dir"]
        marker = os.path.join(_heads_dir(), f"tcp_127.0.0.1_{port}")
        assert registered_head_session(f"tcp:127.0.0.1:{port}") == session
        assert os.stat(marker).st_mode & 0o077 == 0, oct(os.stat(marker).st_mode)
        [raylet] = [
            p for p in find_ember_processes(root) if module_of(p.cmdline()) == "ember.raylet.raylet"
        ]
        raylet.kill()
        raylet.wait(10)
        # The arena stays (until `ember stop`, or any node starting on the machine meanwhile:
        # another test's, under xdist; sweep_orphan_arenas, test_orphan_arenas).
        out = subprocess.run(
            [ember_cli(), "stop", "--force", "--temp-dir", root],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert out.returncode == 0, out.stderr
        assert not os.path.exists(arena), "the killed raylet's arena is still in /dev/shm"
        assert not os.path.exists(marker), "the stopped head's note is still there"
