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
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner
from ember.cli.main import main
from ember.session import DEFAULT_TEMP_DIR, check_temp_root
from ember.session_processes import find_ember_processes, module_of
from ember_test_utils import dashboard_url_in, ember_cli, head_cluster, wait_until
from remote_host import (  # noqa: F401
    HOLDER,
    PROBE,
    VICTIM,
    WORKLOAD_TASKS,
    in_other_host,
    other_host,
    remote_head,
    tcp_forward,
)

EMBER = ember_cli()


@pytest.fixture(scope="module")
def cluster(remote_head):  # noqa: F811
    return remote_head


def commands(c: dict, out_dir: str) -> dict[str, tuple[list[str], str]]:
    """Each command that talks to a cluster, and a value of this cluster its output shows."""
    return {
        "status": (["status"], f"node_{c['node_id']} ({c['ip']}, head)"),
        "memory": (["memory"], f"| {c['driver_pid']} "),  # the driver's row, by pid
        "stack": (["stack"], f"Node {c['node_id']}"),
        "timeline": (
            ["timeline", "-o", f"{out_dir}/trace.json"],
            "(5 tasks",
        ),  # probe, 2 actors, 2 pings
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
    # The rest of the commands that talk to a cluster, once each, in this order (the actor is
    # listed before it is killed; the job's lines are printed by submit, then listed).
    node = c["node_id"]
    job = "reach_job_{how}"  # each way of passing the token submits (and deletes) its own
    more = [
        ("get", ["get", "nodes", node], f"node_id: {node}"),
        ("list actors", ["list", "actors"], HOLDER),
        ("kill-actor", ["kill-actor", VICTIM], "killed actor "),
        ("job submit", ["job", "submit", "--submission-id", job, "--", "echo", "ran"], "ran"),
        ("job list", ["job", "list"], "echo ran"),
        ("job status", ["job", "status", job], f"Status for job '{job}': SUCCEEDED"),
        ("job logs", ["job", "logs", job], "ran"),
        ("job stop", ["job", "stop", job], f"Job '{job}' had already ended (SUCCEEDED)"),
        ("job delete", ["job", "delete", job], f"Job '{job}' deleted"),
    ]
    for i, (name, args, shows) in enumerate(more):
        address = url if i % 2 else gcs
        # Options go before a job's `--` (after it, all is the entrypoint's).
        cut = args.index("--") if "--" in args else len(args)
        ways = [("--token", ["--address", address, "--token", token], {})]
        if name != "kill-actor":  # once: a second kill finds it dead
            ways.append(("EMBER_TOKEN", ["--address", address], {"EMBER_TOKEN": token}))
        for how, options, env in ways:
            named = [a.format(how=how.strip("-")) for a in args]
            argv = [*named[:cut], *options, *named[cut:]]
            cases.append((f"{name} {how}", argv, env, shows.format(how=how.strip("-"))))
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
    done = in_other_host(
        c["ns"], [sys.executable, "-c", REMOTE, json.dumps(batch)], 180, cwd=str(tmp_path)
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
            conns, module = p.net_connections("inet"), module_of(p.cmdline())
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


RAY = Path(__file__).resolve().parents[1] / "tools" / ".ray-venv" / "bin" / "ray"


def test_rays_cli_on_another_host_passes_the_token_in_its_token_mode(cluster):
    """Ray 2.60's `ray list` from namespace ``b`` against the head's dashboard: refused
    without the token, answered with RAY_AUTH_MODE=token RAY_AUTH_TOKEN=<token> (Ray's
    clients then send ``Authorization: Bearer``), as the README says."""
    if not RAY.exists():
        pytest.skip(f"Ray's clients are not installed (no {RAY}); run scripts/dev.sh setup")
    c = cluster
    url = f"http://{c['ip']}:{c['dash_port']}"
    argv = [str(RAY), "list", "actors", "--address", url, "--format", "json"]
    plain = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_", "RAY_"))}
    plain["RAY_USAGE_STATS_ENABLED"] = "0"
    refused = in_other_host(c["ns"], argv, 120, env=plain)
    assert refused.returncode != 0 and "token" in refused.stderr.lower(), refused.stderr
    env = {**plain, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": c["token"]}
    done = in_other_host(c["ns"], argv, 120, env=env)
    assert done.returncode == 0, done.stderr
    assert HOLDER in {a["class_name"] for a in json.loads(done.stdout)}, done.stdout


def test_a_tunnel_to_a_loopback_dashboard_needs_no_token(other_host, tmp_path):  # noqa: F811
    """The README's SSH tunnel: the dashboard left on loopback (the default), reached from
    ``b`` through a relay arriving on the head's loopback as ``ssh -L`` does; every command
    with ``--address http://...`` and no token."""
    ns, ip = other_host
    with head_cluster(prefix="emb-tun-") as (_, _, head):
        dash_port = int(dashboard_url_in(head.stdout).rsplit(":", 1)[1])
        assert "From another machine's browser" not in head.stdout  # no token to hand out
        node = head.stdout.split("Node ", 1)[1].split()[0]
        with tcp_forward(ip, dash_port) as port:
            url = f"http://{ip}:{port}"
            plain = {"EMBER_TOKEN": None, "EMBER_ADDRESS": None, "EMBER_TMPDIR": None}
            cases = [
                (["status", "--address", url], f"node_{node} (127.0.0.1, head)"),
                (["list", "nodes", "--address", url], node),
                (["logs", "--address", url], "raylet.log"),
            ]
            batch = [[args, plain] for args, _ in cases]
            done = in_other_host(
                ns, [sys.executable, "-c", REMOTE, json.dumps(batch)], 120, cwd=str(tmp_path)
            )
        assert done.returncode == 0, done.stderr
        for (args, shows), (code, output) in zip(cases, json.loads(done.stdout), strict=True):
            assert code == 0 and shows in output, (args, code, output)
