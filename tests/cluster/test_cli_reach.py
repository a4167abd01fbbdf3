"""The CLI reaches a cluster the usual ways (issue 15, item 5): every command that talks to a
cluster, with no address, ``127.0.0.1:PORT``, ``NODE_IP:PORT``, the dashboard's URL and
``EMBER_ADDRESS``; the token from ``--token``, ``EMBER_TOKEN`` or the session's file.

One head (``ember start --head``) on a node IP that is not loopback: the root namespace's end
of a veth pair whose other end is in a network namespace, ``b``, standing for another host.
Commands on the head's machine run in this process (click's runner); those from ``b`` run in
one subprocess there, with a private mount namespace hiding the machine's session notes, as
another host's disk would."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap

import psutil
import pytest
from click.testing import CliRunner
from ember.cli.main import main
from ember.cli.stop import _module_of, find_ember_processes
from ember.session import DEFAULT_TEMP_DIR, check_temp_root
from ember_test_utils import dashboard_url_in, ember_cli, free_port, wait_until

EMBER = ember_cli()
PROBE = "reach_probe"  # the task the workload runs, looked for in the commands' output


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def other_host():
    """Namespace ``b`` (10.X.Y.2) joined to this one (10.X.Y.1) by a veth pair; deleting the
    namespace deletes the pair."""
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


# A driver that ran PROBE and holds an object in the store until its stdin closes.
DRIVER = textwrap.dedent(
    f"""
    import sys, ember
    ember.init(address=sys.argv[1])
    @ember.remote
    def {PROBE}():
        return ember.get_runtime_context().get_node_id()
    node = ember.get({PROBE}.remote(), timeout=60)
    held = ember.put(b"x" * 300_000)
    print(node, flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture(scope="module")
def cluster(other_host):
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


def commands(c: dict, out_dir: str) -> dict[str, tuple[list[str], str]]:
    """Each command that talks to a cluster, and a value of this cluster its output shows."""
    return {
        "status": (["status"], f"node_{c['node_id']} ({c['ip']}, head)"),
        "memory": (["memory"], f"| {c['driver_pid']} "),  # the driver's row, by pid
        "stack": (["stack"], f"Node {c['node_id']}"),
        "timeline": (["timeline", "-o", f"{out_dir}/trace.json"], "(1 tasks"),
        "list": (["list", "tasks"], PROBE),
        "summary": (["summary", "tasks"], PROBE),
        "logs": (["logs"], "raylet.log"),
        "dashboard": (["dashboard"], f":{c['dash_port']}"),
    }


def test_every_command_reaches_the_head_every_way(cluster, tmp_path):
    c = cluster
    runner = CliRunner()
    quiet = {"EMBER_ADDRESS": None, "EMBER_TOKEN": None, "EMBER_TMPDIR": None}

    def run(args: list[str], env: dict | None = None):
        return runner.invoke(main, args, env={**quiet, **(env or {})}, catch_exceptions=False)

    # The probe's events reach the dashboard within a second or two of its end.
    wait_until(
        lambda: PROBE in run(["list", "tasks", "--temp-dir", c["temp_dir"]]).output,
        timeout=30,
        interval=0.5,
        message="the probe task in the dashboard",
    )
    gcs, url = f"{c['ip']}:{c['port']}", f"http://{c['ip']}:{c['dash_port']}"
    forms = {
        "the newest local session": (["--temp-dir", c["temp_dir"]], {}),
        "127.0.0.1:PORT": (["--address", f"127.0.0.1:{c['port']}"], {}),
        "NODE_IP:PORT": (["--address", gcs], {}),
        "the dashboard's URL": (["--address", url], {}),
        "EMBER_ADDRESS=HOST:PORT": ([], {"EMBER_ADDRESS": gcs}),
        "EMBER_ADDRESS=URL": ([], {"EMBER_ADDRESS": url}),
    }
    for name, (args, shows) in commands(c, str(tmp_path)).items():
        for form, (extra, env) in forms.items():
            res = run([*args, *extra], env)
            assert res.exit_code == 0, (name, form, res.output)
            assert shows in res.output, (name, form, res.output)


# Run in namespace ``b``: each [args, env] through the CLI in this process; their results.
REMOTE = textwrap.dedent(
    """
    import json, sys
    from click.testing import CliRunner
    from ember.cli.main import main
    runner = CliRunner()
    out = []
    for args, env in json.loads(sys.argv[1]):
        res = runner.invoke(main, args, env=env)
        out.append([res.exit_code, res.output])
    print(json.dumps(out))
    """
)


def test_another_host_reaches_it_with_the_token(cluster, tmp_path):
    c = cluster
    gcs, url = f"{c['ip']}:{c['port']}", f"http://{c['ip']}:{c['dash_port']}"
    token = c["token"]
    cases = []
    for i, (name, (args, shows)) in enumerate(commands(c, str(tmp_path)).items()):
        address = gcs if i % 2 else url  # both forms, each command once
        cases.append(
            (f"{name} --token", [*args, "--address", address, "--token", token], {}, shows)
        )
    cases += [
        ("status EMBER_TOKEN", ["status", "--address", gcs], {"EMBER_TOKEN": token}, "head)"),
        ("list EMBER_TOKEN", ["list", "tasks", "--address", url], {"EMBER_TOKEN": token}, PROBE),
        ("memory EMBER_*", ["memory"], {"EMBER_TOKEN": token, "EMBER_ADDRESS": url}, "Summary"),
    ]
    refused = [
        ("status", ["status", "--address", gcs], f"connecting to tcp:{gcs} needs the cluster"),
        ("list", ["list", "tasks", "--address", url], f"the dashboard at {url} needs the cluster"),
        ("stack", ["stack", "--address", gcs], f"connecting to tcp:{gcs} needs the cluster"),
    ]
    plain = {"EMBER_TOKEN": None, "EMBER_ADDRESS": None, "EMBER_TMPDIR": None}
    batch = [[args, {**plain, **env}] for _, args, env, _ in cases]
    batch += [[args, plain] for _, args, _ in refused]
    # The namespaces share this machine's files: a private mount hides the heads' notes in
    # the default temp dir (and no --temp-dir names the test's), as another disk would.
    hide = f'mkdir -p {DEFAULT_TEMP_DIR} && mount -t tmpfs none {DEFAULT_TEMP_DIR} && exec "$@"'
    done = subprocess.run(
        ["ip", "netns", "exec", c["ns"], "unshare", "--mount", "sh", "-c", hide, "sh"]
        + [sys.executable, "-c", REMOTE, json.dumps(batch)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    for (what, _, _, shows), (code, output) in zip(cases, results[: len(cases)], strict=True):
        assert code == 0 and shows in output, (what, code, output)
    for (what, _, says), (code, output) in zip(refused, results[len(cases) :], strict=True):
        assert code == 1, (what, output)
        assert says in output and "pass --token or set EMBER_TOKEN" in output, (what, output)
        assert "cluster_token" in output, (what, output)  # where the token is


def test_every_node_listener_answers_on_loopback_too(cluster):
    """Each TCP port on the node IP is also open on 127.0.0.1 (the dashboard's HTTP port is
    on every interface here)."""
    on: dict[str, set] = {c: set() for c in (cluster["ip"], "127.0.0.1", "0.0.0.0")}
    for p in find_ember_processes(cluster["root"]):
        try:
            conns, module = p.net_connections("inet"), _module_of(p.cmdline())
        except psutil.Error:
            continue
        for conn in conns:
            ip = conn.laddr.ip.removeprefix("::ffff:")  # gRPC's sockets are IPv6 ones
            if conn.status == psutil.CONN_LISTEN and ip in on:
                on[ip].add((module, conn.laddr.port))
    modules = {m for m, _ in on[cluster["ip"]]}
    # Workers keep the zygote's command line; the agents' hub is in the dashboard's process.
    assert modules == {
        "ember.gcs.server",
        "ember.raylet.raylet",
        "ember.raylet.zygote",
        "ember.dashboard.server",
    }, on
    assert ("ember.gcs.server", cluster["port"]) in on[cluster["ip"]]
    assert on["127.0.0.1"] == on[cluster["ip"]], on
    assert {port for _, port in on["0.0.0.0"]} == {cluster["dash_port"]}, on


def test_the_session_root_never_shadows_the_package(tmp_path):
    """A script run from the temp dir's parent imports Ember, not the session root."""
    parent = tmp_path / "scripts"
    parent.mkdir()
    root = parent / os.path.basename(DEFAULT_TEMP_DIR)  # the default root's name, privately
    script = parent / "which.py"
    script.write_text("import ember; print(getattr(ember, '__file__', None))\n")
    code = textwrap.dedent(
        f"""
        from ember.session import create_session_dir
        print(create_session_dir({str(root)!r}))
        """
    )
    made = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"{root}/session_")
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=parent, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == os.path.abspath(sys.modules["ember"].__file__)
    # The old name did shadow it (a namespace package, no __file__), and is now refused.
    (parent / "ember").mkdir()
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=parent, timeout=60
    )
    assert run.stdout.strip() == "None"
    with pytest.raises(ValueError, match="named like the 'ember' package"):
        check_temp_root(str(parent / "ember"))
