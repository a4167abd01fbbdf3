"""A session's commands follow the session (issue 28, item 2): ``ember start --head
--temp-dir X`` prints next steps naming X and the address, which act on that cluster;
``address="auto"`` (and the CLI with no address) with several clusters running names them and
refuses to guess; ``ember stop`` with no arguments stops only the default temp dir's clusters,
``--temp-dir X`` those under X (``--all``, every one: tests/cluster/test_cluster_cli.py, in a
PID namespace of its own).

Three heads (``ember start`` processes): two under one temp root ``a`` and one under ``b``.
"The default temp dir" is ``a`` here through EMBER_TMPDIR: the machine's real one is shared
with other users of it, which these tests never stop."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest
from ember.session_processes import find_ember_processes
from ember_test_utils import ember_cli, free_port

pytestmark = pytest.mark.timeout(300)
EMBER = ember_cli()


def _env(**values: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("EMBER_ADDRESS", "EMBER_TMPDIR")}
    env.update({k: v for k, v in values.items() if v is not None})
    return env


def _start(temp_dir: str | None, env: dict[str, str]) -> tuple[str, subprocess.CompletedProcess]:
    port = free_port()
    argv = [EMBER, "start", "--head", "--port", str(port), "--num-cpus", "1"]
    argv += ["--node-ip-address", "127.0.0.1", "--include-dashboard", "false"]
    argv += ["--object-store-memory", str(64 * 2**20)]
    argv += ["--temp-dir", temp_dir] if temp_dir else []
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return f"127.0.0.1:{port}", done


@pytest.fixture(scope="module")
def heads():
    roots = [tempfile.mkdtemp(prefix=f"emb-ses{x}-", dir="/tmp") for x in "ab"]
    a, b = roots
    try:
        # One under ``a`` as the default (EMBER_TMPDIR, no --temp-dir), one named with it.
        a1, a1_out = _start(None, _env(EMBER_TMPDIR=a))
        a2, a2_out = _start(a, _env())
        b1, b1_out = _start(b, _env())
        yield {"a": a, "b": b, "a1": a1, "a2": a2, "b1": b1, "out": [a1_out, a2_out, b1_out]}
    finally:
        for root in roots:
            subprocess.run([EMBER, "stop", "--force", "--temp-dir", root], timeout=120)
            left = find_ember_processes(root)
            shutil.rmtree(root, ignore_errors=True)
            assert not left, f"processes of {root} left: {left}"


def _node_id(start_output: str) -> str:
    return _line(start_output, "Node ").split()[1]


def _line(output: str, starts: str) -> str:
    (line,) = [ln.strip() for ln in output.splitlines() if ln.strip().startswith(starts)]
    return line


def test_next_steps_name_the_temp_dir_and_the_address(heads):
    b, b1 = heads["b"], heads["b1"]
    out = heads["out"][2].stdout
    assert _line(out, "To see the cluster:") == (
        f"To see the cluster:   ember status --address {b1} --temp-dir {b}"
    )
    assert _line(out, "To stop the Ember processes") == (
        f"To stop the Ember processes under {b} on this machine:   ember stop --temp-dir {b}"
    )
    assert f"ember.init(address='{b1}')" in out
    # The printed status command, run as printed, shows this cluster although others run.
    status = _line(out, "To see the cluster:").split(":", 1)[1].strip()
    argv = shlex.split(status)
    assert argv[0] == "ember"
    done = subprocess.run([EMBER, *argv[1:]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"node_{_node_id(out)} (127.0.0.1, head)" in done.stdout, done.stdout
    # Without --temp-dir (the default root's head), the default spellings.
    a_out = heads["out"][0].stdout
    assert "ember.init(address='auto')" in a_out
    assert _line(a_out, "To stop the Ember processes") == (
        "To stop the Ember processes of the default temp dir on this machine:   ember stop"
    )


DRIVER = textwrap.dedent(
    """
    import sys, ember
    temp_dir = sys.argv[1] or None
    try:
        ember.init(address="auto", temp_dir=temp_dir)
    except ConnectionError as e:
        print("REFUSED", e)
        sys.exit(3)
    @ember.remote
    def where():
        return ember.get_runtime_context().get_node_id()
    print("JOINED", ember.get(where.remote(), timeout=60))
    """
)


def _driver(temp_dir: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", DRIVER, temp_dir],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # not /tmp
    )


def test_auto_refuses_to_guess_among_several_clusters(heads):
    a, b = heads["a"], heads["b"]
    # Two clusters under one temp root: both named, with their temp dir and start.
    same_root = _driver("", _env(EMBER_TMPDIR=a))
    assert same_root.returncode == 3, same_root.stdout + same_root.stderr
    said = same_root.stdout
    assert f"2 Ember clusters run under {a}, so 'auto' will not guess" in said, said
    for address in (heads["a1"], heads["a2"]):
        row = _line(said, address)
        assert f"temp dir {a}, started 20" in row, row
    assert heads["b1"] not in said
    assert "ember.init(address='HOST:PORT')" in said and "EMBER_ADDRESS" in said
    # No temp dir named: the machine's clusters under any root count (b's too).
    anywhere = _driver("", _env())
    assert anywhere.returncode == 3, anywhere.stdout + anywhere.stderr
    for address, root in ((heads["a1"], a), (heads["a2"], a), (heads["b1"], b)):
        assert f"temp dir {root}," in _line(anywhere.stdout, address), anywhere.stdout
    # One cluster where it looks: joined, as before.
    joined = _driver(b, _env())
    assert joined.returncode == 0, joined.stdout + joined.stderr
    assert joined.stdout.split() == ["JOINED", _node_id(heads["out"][2].stdout)]


def test_the_cli_refuses_to_guess_too(heads):
    a = heads["a"]
    done = subprocess.run(
        [EMBER, "status"], capture_output=True, text=True, timeout=60, env=_env(EMBER_TMPDIR=a)
    )
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert f"2 Ember clusters run under {a}" in said and heads["a1"] in said, said
    assert "--address HOST:PORT" in said
    # Named, it answers.
    done = subprocess.run(
        [EMBER, "status", "--address", heads["a2"]],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(EMBER_TMPDIR=a),
    )
    assert done.returncode == 0, done.stderr


def test_stop_without_arguments_stops_only_the_default_temp_dirs(heads):
    a, b = heads["a"], heads["b"]
    assert find_ember_processes(a) and find_ember_processes(b)
    with pytest.raises(subprocess.CalledProcessError) as both:
        subprocess.run([EMBER, "stop", "--all", "--temp-dir", b], check=True, capture_output=True)
    assert b"pass --temp-dir DIR or --all, not both" in both.value.stderr
    done = subprocess.run(
        [EMBER, "stop"], capture_output=True, text=True, timeout=120, env=_env(EMBER_TMPDIR=a)
    )
    assert done.returncode == 0, done.stderr
    assert f"Ember process(es) under {a}." in done.stdout
    left = _line(done.stdout, "Left running: Ember processes under other temp dirs:")
    assert f" {b} (" in left, left  # among other users' of this machine
    assert find_ember_processes(a) == []
    assert find_ember_processes(b), "ember stop stopped a cluster of another temp dir"
    # The one left is now the only one: 'auto' with no temp dir named finds it, unless the
    # machine runs others (other users' sessions under the default root).
    done = subprocess.run(
        [EMBER, "stop", "--temp-dir", b], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and f"under {b}." in done.stdout, done.stdout + done.stderr
    assert find_ember_processes(b) == []
