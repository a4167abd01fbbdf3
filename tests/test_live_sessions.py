"""Tools find this machine's running nodes (``ember status`` with no address, ``init("auto")``,
the token of a local cluster) from the sessions their temp root lists as live, not by reading
every session directory the root has kept: a machine in use keeps thousands, and each cost a
file read and a socket try on every command."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

import pytest
from ember import cluster_address
from ember.session import LIVE_DIR
from ember.session_processes import find_ember_processes
from ember_test_utils import ember_cli, free_port


def _dead_session(root: str, i: int) -> str:
    """A session an earlier node left: its node.json names a raylet that is gone."""
    path = os.path.join(root, f"session_2026-01-01_00-00-00_{i:06d}_1")
    os.makedirs(os.path.join(path, "sockets"))
    with open(os.path.join(path, "node.json"), "w") as f:
        json.dump({"raylet_address": f"unix:{path}/sockets/raylet", "pids": {"raylet": 1}}, f)
    return path


@pytest.fixture
def root():
    path = tempfile.mkdtemp(prefix="emb-live-", dir="/tmp")
    yield path
    subprocess.run([ember_cli(), "stop", "--force", "--temp-dir", path], capture_output=True)
    assert not find_ember_processes(path)
    subprocess.run(["rm", "-rf", path])


def test_a_running_node_is_found_without_reading_the_stopped_ones(root, monkeypatch):
    for i in range(2000):
        _dead_session(root, i)
    started = subprocess.run(
        [ember_cli(), "start", "--head", "--temp-dir", root, "--port", str(free_port())]
        + ["--include-dashboard", "false"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 0, started.stderr
    reads: list[str] = []
    real_read = cluster_address.read_node_info

    def counted(session: str):
        reads.append(session)
        return real_read(session)

    monkeypatch.setattr(cluster_address, "read_node_info", counted)
    nodes = cluster_address.live_local_nodes(root)
    assert len(nodes) == 1 and nodes[0]["head"], nodes
    assert nodes[0]["session_dir"].startswith(root)
    assert reads == [nodes[0]["session_dir"]]  # the one listed session, none of the 2,000
    assert os.listdir(os.path.join(root, LIVE_DIR)) == [os.path.basename(nodes[0]["session_dir"])]

    stopped = subprocess.run(
        [ember_cli(), "stop", "--temp-dir", root], capture_output=True, text=True, timeout=60
    )
    assert stopped.returncode == 0, stopped.stderr
    assert os.listdir(os.path.join(root, LIVE_DIR)) == []  # unlisted by `ember stop`
    assert cluster_address.live_local_nodes(root) == []


def test_a_listed_session_is_unlisted_once_its_raylet_is_gone_not_while_it_starts(root):
    live = os.path.join(root, LIVE_DIR)
    os.makedirs(live)
    killed = _dead_session(root, 1)  # its node was SIGKILLed: it could not unlist itself
    with open(os.path.join(killed, "node.json"), "w") as f:
        # A pid that ran and exited: this test's own child, reaped.
        child = subprocess.Popen(["true"])
        child.wait()
        json.dump(
            {"raylet_address": f"unix:{killed}/sockets/raylet", "pids": {"raylet": child.pid}}, f
        )
    starting = _dead_session(root, 2)
    with open(os.path.join(starting, "node.json"), "w") as f:
        # Its raylet process runs but does not answer yet: this test's process stands in.
        json.dump(
            {"raylet_address": f"unix:{starting}/sockets/raylet", "pids": {"raylet": os.getpid()}},
            f,
        )
    no_info_yet = os.path.join(root, "session_2026-01-01_00-00-00_000003_1")
    os.makedirs(no_info_yet)
    for path in (killed, starting, no_info_yet):
        open(os.path.join(live, os.path.basename(path)), "w").close()

    assert cluster_address.live_local_nodes(root) == []
    assert sorted(os.listdir(live)) == sorted(os.path.basename(p) for p in (starting, no_info_yet))
