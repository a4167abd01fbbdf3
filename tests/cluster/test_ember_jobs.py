"""``ember job`` and ``ember.job_submission`` against a head started as users start it: a job
submitted with a local working_dir runs its entrypoint there and joins the cluster; ``submit``
without ``--no-wait`` prints the job's output and exits with its outcome; a failing job's
exit code and message; a stopped job; ``list``, ``logs``, ``delete``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
from ember.job_submission import JobStatus, JobSubmissionClient
from ember_test_utils import ember_cli, head_cluster, wait_until

pytestmark = pytest.mark.timeout(240)

PROGRAM = textwrap.dedent(
    """
    import ember
    from helper_mod import MARK

    ember.init()

    @ember.remote
    def double(x):
        return 2 * x

    print(MARK, sum(ember.get([double.remote(i) for i in range(10)])), flush=True)
    """
)


@pytest.fixture(scope="module")
def head():
    with head_cluster(
        "--num-cpus", "2", "--dashboard-port", "0", "--labels", "zone=head,tier=gold"
    ) as (root, _port, started):
        url = re.search(r"Dashboard: (http://[0-9.:]+)", started.stdout).group(1)
        yield root, url


def job_cli(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ember_cli(), "job", *args[:1], "--address", url, *args[1:]],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_submit_with_a_working_dir_waits_and_prints_the_output(head, tmp_path):
    _, url = head
    work = tmp_path / "work"
    work.mkdir()
    (work / "main.py").write_text(PROGRAM)
    (work / "helper_mod.py").write_text("MARK = 'job-marker-7'\n")
    (work / "big.bin").write_bytes(b"\0" * 100_000)
    out = job_cli(
        url,
        "submit",
        "--working-dir",
        str(work),
        "--runtime-env-json",
        json.dumps({"excludes": ["*.bin"], "env_vars": {"JOB_FLAVOUR": "plain"}}),
        "--",
        f"{sys.executable} main.py && echo flavour=$JOB_FLAVOUR",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "job-marker-7 90" in out.stdout and "flavour=plain" in out.stdout
    sid = re.search(r"Job '([^']+)' submitted successfully", out.stderr).group(1)
    assert f"Job '{sid}' succeeded" in out.stderr
    client = JobSubmissionClient(url)
    info = client.get_job_info(sid)
    assert info.status is JobStatus.SUCCEEDED and info.driver_exit_code == 0
    assert "job-marker-7 90" in client.get_job_logs(sid)


def test_a_failing_job_says_why_and_exits_1(head):
    _, url = head
    out = job_cli(url, "submit", "--", "echo about-to-fail; exit 3")
    assert out.returncode == 1 and "about-to-fail" in out.stdout
    sid = re.search(r"Job '([^']+)' submitted successfully", out.stderr).group(1)
    info = JobSubmissionClient(url).get_job_info(sid)
    assert info.status is JobStatus.FAILED and info.driver_exit_code == 3
    assert f"Job '{sid}' failed" in out.stderr


def test_stop_list_status_logs_and_delete(head):
    _, url = head
    out = job_cli(
        url, "submit", "--no-wait", "--submission-id", "ember-sleeper", "--", "echo up; sleep 600"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ember-sleeper"
    client = JobSubmissionClient(url)
    wait_until(
        lambda: (
            client.get_job_status("ember-sleeper") is JobStatus.RUNNING
            and "up" in client.get_job_logs("ember-sleeper")
        ),
        60,
        0.3,
        "the sleeper running",
    )
    status = job_cli(url, "status", "ember-sleeper")
    assert "Status for job 'ember-sleeper': RUNNING" in status.stdout
    stopped = job_cli(url, "stop", "ember-sleeper")
    assert stopped.returncode == 0 and "Job 'ember-sleeper' stopped" in stopped.stdout
    assert client.get_job_status("ember-sleeper") is JobStatus.STOPPED
    listed = json.loads(job_cli(url, "list", "--format", "json").stdout)
    assert {"ember-sleeper": "STOPPED"}.items() <= {
        j["submission_id"]: j["status"] for j in listed
    }.items()
    assert job_cli(url, "logs", "ember-sleeper").stdout.startswith("up")
    deleted = job_cli(url, "delete", "ember-sleeper")
    assert "Job 'ember-sleeper' deleted" in deleted.stdout
    assert "ember-sleeper" not in [j.submission_id for j in client.list_jobs()]
    missing = job_cli(url, "status", "ember-sleeper")
    assert missing.returncode == 1 and "ember-sleeper" in missing.stderr


MODULES_PROGRAM = textwrap.dedent(
    """
    import ember
    import jobslib

    ember.init()

    @ember.remote
    def from_a_task():
        import jobslib  # a worker of the job imports it too

        return jobslib.greet("task")

    print(jobslib.greet("driver"), ember.get(from_a_task.remote()), flush=True)
    """
)


def test_py_modules_reach_the_driver_and_its_tasks(head, tmp_path):
    _, url = head
    lib = tmp_path / "jobslib"
    lib.mkdir()
    (lib / "__init__.py").write_text("def greet(who):\n    return f'hello-{who}'\n")
    (tmp_path / "prog.py").write_text(MODULES_PROGRAM)
    client = JobSubmissionClient(url)
    sid = client.submit_job(
        entrypoint=f"{sys.executable} {tmp_path / 'prog.py'}",
        runtime_env={"py_modules": [str(lib)]},
    )
    wait_until(lambda: client.get_job_status(sid).is_terminal(), 60, 0.3, "the job's end")
    logs = client.get_job_logs(sid)
    assert client.get_job_status(sid) is JobStatus.SUCCEEDED, logs
    assert "hello-driver hello-task" in logs
    assert client.get_job_info(sid).runtime_env["py_modules"][0].startswith("gcs://_ray_pkg_")


def test_ember_start_labels_the_node_and_a_selector_uses_them(head):
    """``ember start --labels`` as users pass it: the labels reach the GCS (Ray's state API
    lists them) and a job's label selector picks the node by them; a malformed --labels is
    refused before anything starts, naming the option."""
    _, url = head
    nodes = json.loads(
        subprocess.run(
            [ember_cli(), "list", "nodes", "--address", url, "--detail", "--format", "json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )
    [node] = nodes
    assert (node["labels"]["zone"], node["labels"]["tier"]) == ("head", "gold")
    out = job_cli(
        url,
        "submit",
        "--entrypoint-num-cpus",
        "1",
        "--entrypoint-label-selector",
        json.dumps({"tier": "in(gold,silver)"}),
        "--",
        "echo placed-by-label",
    )
    assert out.returncode == 0 and "placed-by-label" in out.stdout, out.stdout + out.stderr
    bad = subprocess.run(
        [ember_cli(), "start", "--head", "--labels", "zone"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--labels" in bad.stderr and "KEY=VALUE" in bad.stderr
