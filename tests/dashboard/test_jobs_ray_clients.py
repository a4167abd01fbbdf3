"""Ray 2.60's own Jobs clients against Ember's dashboard: ``ray job submit|status|logs|list|
stop|delete`` and ``JobSubmissionClient``, run from their own environment
(``tests/tools/.ray-venv``) on a real Ember head, whose entrypoints are Ember programs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import ember
import pytest
from ember.cluster_utils import Cluster
from ember_test_utils import assert_no_ember_children
from test_ray_clients import RAY_PYTHON, _ray_env, _require_ray

RUNNER = Path(__file__).with_name("ray_jobs_runner.py")
PROGRAM = (
    "import os, ember; ember.init(); "
    "print('MARK', ember.get(ember.put(20)) * 2, os.environ.get('GREETING'), flush=True)"
)


@pytest.fixture(scope="module")
def answers():
    _require_ray()
    if ember.is_initialized():
        ember.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    try:
        res = subprocess.run(
            [str(RAY_PYTHON), str(RUNNER), c.head_node.dashboard_url, PROGRAM],
            capture_output=True,
            text=True,
            timeout=150,
            env=_ray_env(),
        )
        assert res.returncode == 0, res.stderr[-3000:]
        yield json.loads(res.stdout.splitlines()[-1])
    finally:
        c.shutdown()
        assert_no_ember_children()


def test_ray_job_cli(answers):
    cli = answers["cli"]
    assert all(v["exit_code"] == 0 for v in cli.values()), cli
    assert "MARK 40 None" in cli["submit"]["output"]
    assert "Job 'cli-wait' succeeded" in cli["submit"]["output"]
    # --working-dir (uploaded by Ray's client) and --runtime-env-json env_vars.
    assert cli["submit_wd"]["exit_code"] == 0, cli["submit_wd"]["output"]
    assert "wd-marker from-cli" in cli["submit_wd"]["output"]
    assert "cli-sleep" in cli["submit_no_wait"]["output"]
    assert "Job 'cli-wait' succeeded" in cli["status"]["output"]
    assert "MARK 40" in cli["logs"]["output"]
    assert "cli-wait" in cli["list"]["output"] and "cli-sleep" in cli["list"]["output"]
    assert "Job 'cli-sleep' was stopped" in cli["stop"]["output"]
    assert "Job 'cli-sleep' was stopped" in cli["status_stopped"]["output"]
    assert "Job 'cli-sleep' deleted successfully" in cli["delete"]["output"]


def test_job_submission_client(answers):
    sdk = answers["sdk"]
    assert sdk["py_modules"]["status"] == "SUCCEEDED", sdk["py_modules"]
    assert "from-py-modules" in sdk["py_modules"]["logs"]
    assert sdk["tail"] == "MARK 40 from-sdk\n"
    assert sdk["logs"] == "MARK 40 from-sdk\n"
    assert sdk["status"] == "SUCCEEDED" and sdk["listed"]
    assert sdk["info"] == {"status": "SUCCEEDED", "exit": 0, "meta": {"k": "v"}}
    assert sdk["failing"]["status"] == "FAILED" and sdk["failing"]["exit"] == 7
    assert "exit code 7" in sdk["failing"]["message"]
    assert sdk["stop"] is True and sdk["stopped_status"] == "STOPPED"
    assert sdk["delete"] is True
