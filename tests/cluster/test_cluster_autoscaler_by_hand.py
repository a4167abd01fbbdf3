"""The autoscaler of a head started by hand, as the docs show it (``ember start --head
--autoscaling-config cluster.yaml``, no token in the environment): the monitor the head
supervises starts before the head's session has its token, finds it once it is there, and
scales within seconds, not after a minute of refused calls."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

import yaml
from ember.session_processes import find_ember_processes
from ember_test_utils import ember_cli, head_cluster

DRIVER = textwrap.dedent(
    """
    import sys, time
    import ember

    ember.init(address="auto", temp_dir=sys.argv[1])

    @ember.remote(num_cpus=1)
    def where():
        return ember.get_runtime_context().get_node_id()

    started = time.monotonic()
    node = ember.get(where.remote(), timeout=120)
    print(node, round(time.monotonic() - started, 1), flush=True)
    """
)


def test_a_head_started_by_hand_scales_without_a_token_in_its_environment(tmp_path):
    nodes = tempfile.mkdtemp(prefix="bh-", dir="/tmp")  # short: the nodes' Unix socket paths
    config = tmp_path / "cluster.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "cluster_name": "by-hand",
                "max_workers": 1,
                "idle_timeout_minutes": 0.05,
                "provider": {"type": "fake_multinode", "temp_dir": nodes},
                "available_node_types": {
                    "head": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
                    "w": {
                        "resources": {"CPU": 1},
                        "node_config": {},
                        "min_workers": 0,
                        "max_workers": 1,
                    },
                },
                "head_node_type": "head",
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "EMBER_TOKEN"}
    try:
        with head_cluster("--num-cpus", "0", "--autoscaling-config", str(config)) as (root, _, _):
            script = tmp_path / "driver.py"
            script.write_text(DRIVER)
            done = subprocess.run(
                [sys.executable, str(script), root],
                capture_output=True,
                text=True,
                timeout=150,
                env=env,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            node, seconds = done.stdout.split()
            # On a worker node the autoscaler started, well before the monitor's 60 s
            # deadline for a GCS that refuses it.
            assert len(node) == 32 and float(seconds) < 40, done.stdout
    finally:
        subprocess.run(
            [ember_cli(), "stop", "--force", "--temp-dir", nodes], capture_output=True, timeout=90
        )
        deadline = time.monotonic() + 10
        while find_ember_processes(nodes) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = find_ember_processes(nodes)
        shutil.rmtree(nodes, ignore_errors=True)
        assert not left
