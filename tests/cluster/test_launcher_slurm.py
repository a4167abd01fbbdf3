"""The issue's walk with the ``slurm`` provider, as a user types it on a login node, against a
real single-host Slurm (``slurm_host.py``): ``ember up`` starts the head here, at
``provider.gcs_address``; a task needing 2 CPUs (the head has none) makes its autoscaler
``sbatch`` a worker job, which runs it and is ``scancel``'ed when idle; a changed config
(``min_workers: 1``) brings a job back without a restart; ``ember down`` stops the head and
``scancel``s that job, leaving no job and no Ember process. Then ``ember exec --start
--stop`` brings a cluster up for one command and down again.

One test: every step needs the cluster the step before left."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest
import yaml
from autoscaler_process import EMBER
from ember.autoscaler import heads
from ember.session_processes import find_ember_processes
from ember_test_utils import free_port, wait_until
from launcher_cli import ember, ok
from slurm_host import slurm_host

WORKLOAD = """
import ember
ember.init()

@ember.remote(num_cpus=2)
def where():
    return ember.get_runtime_context().get_node_labels()["ember.io/provider-node-id"]

print("job", ember.get(where.remote(), timeout=240))
"""


@pytest.fixture(scope="module")
def slurm():
    yield from slurm_host()


def test_up_with_slurm_scale_up_shrink_down(slurm, tmp_path, monkeypatch) -> None:
    up_dir = tempfile.mkdtemp(prefix="eu-", dir="/tmp")
    monkeypatch.setenv("EMBER_UP_DIR", up_dir)  # this process's heads.* calls too
    monkeypatch.setenv("SLURM_CONF", slurm.conf)
    env = {**slurm.env, "EMBER_UP_DIR": up_dir}
    name = f"sl{os.getpid()}"
    port = free_port()
    raw = {
        "cluster_name": name,
        "max_workers": 1,
        "idle_timeout_minutes": 0.1,  # 6 s: the job goes soon after its task
        "provider": {
            "type": "slurm",
            "gcs_address": f"127.0.0.1:{port}",  # where the jobs' nodes reach the head
            "ember_command": EMBER,
            "node_temp_dir": f"{slurm.root}/n",
            "state_dir": f"{slurm.root}/st",
        },
        "available_node_types": {
            "head": {
                "resources": {"CPU": 0, "object_store_memory": 64 * 1024**2},
                "node_config": {},
                "max_workers": 0,
            },
            "worker": {
                "resources": {"CPU": 2},
                "node_config": {"partition": "debug", "time": "10"},
                "max_workers": 1,
            },
        },
        "head_node_type": "head",
    }
    config = str(tmp_path / "cluster.yaml")
    with open(config, "w") as f:
        yaml.safe_dump(raw, f)
    root = os.path.join(up_dir, name)
    try:
        out = ok(ember(env, "up", config, "-y"))
        assert f"Cluster {name} is up: address 127.0.0.1:{port}" in out
        assert ok(ember(env, "get-head-ip", config)).strip() == "127.0.0.1"

        script = tmp_path / "workload.py"
        script.write_text(WORKLOAD)
        out = ok(ember(env, "submit", config, str(script), timeout=300))
        job = out.split("job ")[1].split()[0]
        assert f"{job} RUNNING ember-{name}-worker" in slurm.jobs()
        status = heads.read_status(heads.running_head(config))
        assert [d["node_type"] for d in status["decisions"] if d["action"] == "launch"] == [
            "worker"
        ]

        # Idle: the autoscaler scancels the job; its node's processes stop with it.
        wait_until(
            lambda: not slurm.jobs(),
            timeout=90,
            interval=0.5,
            message="the idle job was never cancelled",
        )
        wait_until(lambda: heads.worker_ips(config) == [], timeout=30, interval=0.5)

        # A changed config reaches the running autoscaler: min_workers 1 brings a job back.
        raw["available_node_types"]["worker"]["min_workers"] = 1
        with open(config, "w") as f:
            yaml.safe_dump(raw, f)
        assert "the new config reaches its autoscaler" in ok(ember(env, "up", config, "-y"))
        wait_until(
            lambda: heads.worker_ips(config) != [],
            timeout=90,
            interval=0.5,
            message="min_workers 1 never brought a job",
        )
        (again,) = [line.split()[0] for line in slurm.jobs()]
        assert again != job

        # ember down: the head stopped, the job scancel'ed and gone, no Ember process left.
        out = ok(ember(env, "down", config, "-y"))
        assert f"Cancelled 1 Slurm job(s) of cluster {name}" in out
        assert f"Cluster {name} is down" in out
        assert slurm.jobs() == []
        wait_until(
            lambda: not find_ember_processes(slurm.root) and not find_ember_processes(root),
            timeout=30,
            interval=0.5,
            message="Ember processes outlived ember down",
        )
        assert not os.path.exists(root)

        # Ray's exec --start --stop: up if needed, the command on the head, then down.
        out = ok(ember(env, "exec", config, "echo at $EMBER_ADDRESS", "--start", "--stop"))
        assert f"Cluster {name} is up" in out and f"at 127.0.0.1:{port}" in out
        assert f"Cluster {name} is down" in out
        assert not find_ember_processes(root) and not os.path.exists(root)
    finally:
        if os.path.isdir(root):
            ember(env, "down", config, "-y")
        subprocess.run(
            [EMBER, "stop", "--force", "--temp-dir", slurm.root], capture_output=True, timeout=90
        )
        shutil.rmtree(up_dir, ignore_errors=True)
