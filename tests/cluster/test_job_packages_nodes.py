"""A job's working_dir and py_modules reach its tasks on every node, not only on the node
that runs its entrypoint: a worker elsewhere copies the package from the head through the GCS
and imports from its own copy (``ember.runtime_env_packages``)."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest
from ember.job_submission import JobStatus, JobSubmissionClient
from ember_test_utils import wait_until

pytestmark = pytest.mark.timeout(180)

# Runs on the head (a job asking for nothing does); its tasks ask for a resource only the
# other node has, so they run there.
PROGRAM = textwrap.dedent(
    """
    import os
    import ember
    import wd_helper
    import pm_lib

    ember.init()

    @ember.remote(resources={"elsewhere": 1})
    def far():
        import wd_helper, pm_lib
        return (
            ember.get_runtime_context().get_node_id(),
            wd_helper.MARK,
            pm_lib.greet("task"),
            os.path.dirname(wd_helper.__file__),
            os.environ.get("JOB_FLAVOUR"),
        )

    node, mark, greeting, where, flavour = ember.get(far.remote())
    print("driver-node", ember.get_runtime_context().get_node_id())
    print("task-node", node)
    print("task-read", mark, greeting)
    print("task-dir", where)
    print("task-env", flavour)
    """
)


def test_packages_reach_tasks_on_another_node(cluster, tmp_path):
    other = cluster.add_node(num_cpus=1, resources={"elsewhere": 1})
    work = tmp_path / "work"
    work.mkdir()
    (work / "main.py").write_text(PROGRAM)
    (work / "wd_helper.py").write_text("MARK = 'from-the-working-dir'\n")
    lib = tmp_path / "pm_lib"
    lib.mkdir()
    (lib / "__init__.py").write_text("def greet(who):\n    return f'py-module-greets-{who}'\n")
    client = JobSubmissionClient(cluster.head_node.dashboard_url)
    sid = client.submit_job(
        entrypoint=f"{sys.executable} main.py",
        runtime_env={
            "working_dir": str(work),
            "py_modules": [str(lib)],
            "env_vars": {"JOB_FLAVOUR": "spicy"},
        },
    )
    wait_until(lambda: client.get_job_status(sid).is_terminal(), 90, 0.3, "the job's end")
    logs = client.get_job_logs(sid)
    assert client.get_job_status(sid) is JobStatus.SUCCEEDED, logs
    lines = dict(line.split(" ", 1) for line in logs.splitlines() if " " in line)
    assert lines["driver-node"] == cluster.head_node.node_id.hex(), logs
    assert lines["task-node"] == other.node_id.hex(), logs
    assert lines["task-read"] == "from-the-working-dir py-module-greets-task", logs
    # The task imported from the other node's own copy, unpacked in its session.
    assert lines["task-dir"].startswith(other.session_dir + os.sep), (lines, other.session_dir)
    assert os.path.isfile(os.path.join(lines["task-dir"], "wd_helper.py"))
    # The job's env_vars reach its tasks on every node, not only its driver's process.
    assert lines["task-env"] == "spicy", logs


def test_an_unknown_package_name_is_refused_by_the_gcs(cluster):
    """The GCS serves only uploaded packages by a plain name: nothing else on the head."""
    import ember

    ember.init(address=cluster.address)
    try:
        from ember import global_state

        call = global_state.worker.call_gcs_sync
        for name, why in (
            ("_ray_pkg_missing.zip", "is not on this cluster"),
            ("../cluster_token", "bad package name"),
        ):
            with pytest.raises(Exception, match=why):
                call("get_package_chunk", {"name": name, "offset": 0})
    finally:
        ember.shutdown()
