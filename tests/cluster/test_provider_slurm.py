"""The ``slurm`` node provider against a real single-host Slurm (slurmctld + slurmd + munged,
started by the fixture): a task needing 2 CPUs on a head with none makes the autoscaler
``sbatch`` a job that joins as a node, runs it and is ``scancel``'ed when idle; a job Slurm
ends (as at its time limit) is replaced while its work still waits; ``sbatch`` refusing a job is a
clear error. And the Slurm recipe ``examples/slurm/ember-cluster.sbatch`` submitted as it is
makes a cluster that runs a workload."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from autoscaler_process import EMBER, Monitor, start_driver, start_head
from ember.autoscaler.providers.slurm import SlurmNodeProvider
from ember.session_processes import find_ember_processes
from ember_test_utils import REPO_ROOT, free_port, wait_until
from slurm_host import slurm_host

SBATCH_EXAMPLE = REPO_ROOT / "examples" / "slurm" / "ember-cluster.sbatch"


@pytest.fixture(scope="module")
def slurm():
    yield from slurm_host()


@pytest.fixture(scope="module")
def head(slurm):
    """A head with no CPUs (its IP detected, as the jobs' nodes detect theirs)."""
    address, token = start_head(f"{slurm.root}/hd")
    try:
        yield address, token
    finally:
        slurm.run("scancel", "--full", "--user", "root")
        wait_until(lambda: not slurm.jobs(), timeout=60, interval=0.5)
        subprocess.run(
            [EMBER, "stop", "--force", "--temp-dir", slurm.root], capture_output=True, timeout=90
        )
        assert not find_ember_processes(slurm.root)


def _provider_config(slurm, gcs: str) -> dict:
    return {
        "type": "slurm",
        "gcs_address": gcs,
        "ember_command": EMBER,
        "node_temp_dir": f"{slurm.root}/n",
        "state_dir": f"{slurm.root}/st",
    }


def _monitor(slurm, gcs: str, token: str, name: str, minutes: int = 10) -> Monitor:
    config = {
        "cluster_name": name,
        "max_workers": 2,
        "idle_timeout_minutes": 0.1,
        "provider": _provider_config(slurm, gcs),
        "available_node_types": {
            "head": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            "worker": {
                "resources": {"CPU": 2},
                # sbatch --time: the job, and so its node, ends after this long.
                "node_config": {"partition": "debug", "time": str(minutes)},
                "max_workers": 1,  # so the job that ran the task is the only one
            },
        },
        "head_node_type": "head",
    }
    return Monitor(slurm.root, config, token, env=slurm.env)


def _job_state(slurm, job_id: str) -> str:
    out = slurm.run("scontrol", "show", "job", job_id).stdout
    return out.split("JobState=")[1].split()[0] if "JobState=" in out else ""


def test_a_task_needing_2_cpus_runs_in_a_slurm_job_cancelled_when_idle(
    slurm, head, monkeypatch
) -> None:
    gcs, token = head
    monkeypatch.setenv("SLURM_CONF", slurm.conf)  # for the providers this test reads with
    monitor = _monitor(slurm, gcs, token, "sl")
    try:
        driver = start_driver(gcs, token, env=slurm.env)
        out, err = driver.communicate(timeout=300)
        assert driver.returncode == 0, f"{err}\n--- autoscaler:\n{monitor.log()}\n{slurm.logs()}"
        ran = json.loads(out)
        job_id = ran["labels"]["ember.io/provider-node-id"]
        assert ran["labels"]["ember.io/node-type"] == "worker"
        # The job as squeue shows it: named for the cluster and the type, running.
        assert f"{job_id} RUNNING ember-sl-worker" in slurm.jobs()
        # A provider with no table (a new head's) still finds the job and its type in Slurm.
        lost = SlurmNodeProvider(
            {**_provider_config(slurm, gcs), "state_dir": f"{slurm.root}/x"}, "sl"
        )
        assert lost.non_terminated_nodes({"ember-user-node-type": "worker"}) == [job_id]
        assert lost.node_tags(job_id)["ember-cluster-name"] == "sl"
        assert lost.internal_ip(job_id) == socket.gethostbyname(slurm.host)  # its node's
        node_dir = f"{slurm.root}/n/{job_id}"
        assert find_ember_processes(node_dir)
        # Idle: scancel'ed; the job and its node's processes gone.
        wait_until(
            lambda: not slurm.jobs(),
            timeout=90,
            interval=0.5,
            message=f"the idle job was not cancelled:\n{monitor.log()}",
        )
        assert _job_state(slurm, job_id) == "CANCELLED"
        wait_until(lambda: not find_ember_processes(node_dir), timeout=30, interval=0.5)
    finally:
        monitor.stop()


def test_a_job_slurm_ends_is_replaced_while_work_waits(slurm, head, monkeypatch) -> None:
    """A job that ends under a running task (its time limit, preemption, an admin's scancel)
    takes its node with it; the retried task is demand again and gets a new job. Slurm
    itself ends the job here, as it does at a time limit (which would cost this test a
    minute and a half: limits are whole minutes, checked every 30 s); the limit from
    ``node_config`` is asserted on the job as Slurm holds it."""
    gcs, token = head
    monkeypatch.setenv("SLURM_CONF", slurm.conf)  # for the provider this test cleans up with
    monitor = _monitor(slurm, gcs, token, "tl", minutes=1)
    marker = f"{slurm.root}/first-attempt"
    driver = start_driver(gcs, token, marker, env=slurm.env)
    try:
        wait_until(
            lambda: os.path.exists(marker),
            timeout=180,
            interval=0.5,
            message=f"the task never started:\n{monitor.log()}",
        )
        (first,) = [line.split()[0] for line in slurm.jobs()]
        limit = slurm.run("squeue", "-h", "-j", first, "-o", "%l").stdout.strip()
        assert limit == "1:00", f"the job's time limit is {limit!r}, not node_config's 1 minute"
        slurm.run("scancel", first)
        out, err = driver.communicate(timeout=300)
        assert driver.returncode == 0, f"{err}\n--- autoscaler:\n{monitor.log()}"
        second = json.loads(out)["labels"]["ember.io/provider-node-id"]
        assert second != first  # the retry ran in a new job, launched for the waiting task
        assert _job_state(slurm, first) == "CANCELLED"
    finally:
        monitor.stop()
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        provider = SlurmNodeProvider(_provider_config(slurm, gcs), "tl")
        for job in provider.non_terminated_nodes({}):
            provider.terminate_node(job)


def test_sbatch_refusing_a_job_is_a_clear_error(slurm, head, monkeypatch) -> None:
    gcs, token = head
    monkeypatch.setenv("SLURM_CONF", slurm.conf)
    provider = SlurmNodeProvider({**_provider_config(slurm, gcs), "token": token}, "bad")
    with pytest.raises(RuntimeError) as info:
        provider.create_node_with_resources_and_labels(
            {"partition": "nosuch"}, {"ember-user-node-type": "worker"}, 1, {"CPU": 2}, {}
        )
    assert "slurm provider: sbatch refused the job after 0 of 1" in str(info.value)
    assert "Invalid partition name specified" in str(info.value)
    with pytest.raises(ValueError, match="unknown field\\(s\\) partiton"):
        provider.create_node({"partiton": "debug"}, {}, 1)
    assert provider.non_terminated_nodes({}) == []


def test_the_sbatch_recipe_makes_a_cluster_that_runs_a_workload(slurm) -> None:
    out_file = f"{slurm.root}/recipe-%j.out"
    # The recipe reads where Ember is (EMBER, EMBER_PYTHON) from the environment sbatch passes.
    done = subprocess.run(
        ["sbatch", "--parsable", "--nodes=1", "--cpus-per-task=2", f"--output={out_file}"]
        + [str(SBATCH_EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=30,
        env={
            **slurm.env,
            "EMBER": EMBER,
            "EMBER_PYTHON": sys.executable,
            "EMBER_TEMP_DIR": f"{slurm.root}/rx",
            "EMBER_PORT": str(free_port()),
        },
    )
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    wait_until(
        lambda: _job_state(slurm, job_id) not in ("PENDING", "RUNNING", "COMPLETING", ""),
        timeout=240,
        interval=1,
        message="the recipe's job did not end",
    )
    with open(out_file.replace("%j", job_id)) as f:
        output = f.read()
    assert _job_state(slurm, job_id) == "COMPLETED", output
    assert "Nodes in the Ember cluster: 1" in output
    assert "Counter({" in output and ": 20})" in output  # the 20 tasks ran, on its one node
    wait_until(lambda: not find_ember_processes(f"{slurm.root}/rx"), timeout=30, interval=0.5)
