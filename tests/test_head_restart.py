"""The whole head node killed mid-workload and started again, as an operator would: a head
and a worker node (``ember start``, each its own temp dir), a named detached actor holding
state on the worker node, tasks running there for a driver of the worker node, and a job of
the Jobs API running on the head. Every process of the head (GCS, raylet, dashboard with
the head's agent, its workers and the job's entrypoint) is SIGKILLed, then ``ember start
--head`` runs again on the same storage (a real redis-server, or an explicit SQLite file)
and the same port. The user's view: the worker node rejoins (its token still admitted),
the actor answers by name with its state, the driver's running tasks finish and new tasks
run, the job whose driver died with the head is FAILED saying so, nothing hangs and no
process is left over."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import psutil
import pytest
from ember.session_processes import find_ember_processes
from ember_test_utils import COUNTER_SOURCE, ember_cli, free_port, redis_server, wait_until

ENV = {
    "EMBER_HEARTBEAT_INTERVAL": "0.2",
    "EMBER_NODE_DEATH_TIMEOUT": "4",
    "EMBER_GCS_RECONNECT_TIMEOUT": "60",
}

# A driver of the worker node: the detached actor (on the worker node: only it has "far"),
# then tasks that run across the head's death; it prints, waits for the gate file, and
# collects them, then runs new ones.
DRIVER = (
    """
import os, sys, time, ember
ember.init(address=sys.argv[1], temp_dir=sys.argv[2], namespace="app")

"""
    + COUNTER_SOURCE
    + """
Counter = ember.remote(resources={"far": 0.1})(Counter)

@ember.remote(resources={"far": 0.1})
def slow(x, seconds):
    time.sleep(seconds)
    return x * 10

keeper = Counter.options(name="keeper", lifetime="detached").remote()
print("counts", [ember.get(keeper.inc.remote(), timeout=60) for _ in range(3)], flush=True)
running = [slow.remote(i, 6.0) for i in range(2)]
print("running", flush=True)
gate = sys.argv[3]
deadline = time.monotonic() + 120
while not os.path.exists(gate) and time.monotonic() < deadline:
    time.sleep(0.1)
print("finished", ember.get(running, timeout=60), flush=True)
print("new", ember.get(slow.remote(7, 0.0), timeout=60), flush=True)
"""
)

# A driver started after the restart, on the worker node, finds the actor by name.
AFTER = """
import sys, ember
ember.init(address=sys.argv[1], temp_dir=sys.argv[2], namespace="app")

@ember.remote
def plus_one(x):
    return x + 1

keeper = ember.get_actor("keeper")
print(json.dumps({"count": ember.get(keeper.inc.remote(), timeout=60),
                  "tasks": ember.get([plus_one.remote(i) for i in range(4)], timeout=60)}))
""".replace("import sys,", "import json, sys,")

JOB = """
import time, ember
ember.init()
print("job started", flush=True)
time.sleep(600)
"""


@pytest.fixture(params=["sqlite", "redis"])
def storage(request, tmp_path):
    if request.param == "sqlite":
        # Explicit, outside the session directory: a new head (a new session) reuses it.
        yield "sqlite:" + str(tmp_path / "gcs.sqlite3")
    else:
        with redis_server(str(tmp_path)) as url:
            yield url


def _run(argv: list[str], env: dict, timeout: float = 120) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, f"{argv[:3]}: {out.stderr[-3000:]}"
    return out.stdout


def _head_processes(head_root: str) -> list[psutil.Process]:
    """Every process of the head node: its Ember processes and all their descendants (the
    job's entrypoint runs in a session of its own)."""
    procs = {p.pid: p for p in find_ember_processes(head_root)}
    for p in list(procs.values()):
        try:
            procs.update({c.pid: c for c in p.children(recursive=True)})
        except psutil.Error:
            continue
    return list(procs.values())


def _status(address: str, env: dict) -> dict:
    out = _run([ember_cli(), "status", "--address", address, "--format", "json"], env, 60)
    return json.loads(out)


def test_the_whole_head_killed_and_started_again_on_its_storage(storage, tmp_path):
    from ember.job_submission import JobStatus, JobSubmissionClient

    root = tempfile.mkdtemp(prefix="emb-hk-", dir="/tmp")  # short: Unix socket paths
    head_root, worker_root = os.path.join(root, "head"), os.path.join(root, "worker")
    port, dash_port = free_port(), free_port()
    address = f"127.0.0.1:{port}"
    env = dict(os.environ, **ENV)
    env.pop("EMBER_TOKEN", None)
    head = [ember_cli(), "start", "--head", "--port", str(port), "--num-cpus", "1"]
    head += ["--node-ip-address", "127.0.0.1", "--temp-dir", head_root, "--storage", storage]
    head += ["--dashboard-port", str(dash_port), "--object-store-memory", str(64 * 2**20)]
    gate = tmp_path / "gate"
    driver = None
    try:
        out = _run(head, env)
        [token] = [w.split("=", 1)[1] for w in out.split() if w.startswith("--token=")]
        worker = [ember_cli(), "start", "--address", address, "--token", token]
        worker += ["--num-cpus", "2", "--resources", '{"far": 1}', "--temp-dir", worker_root]
        worker += ["--node-ip-address", "127.0.0.1", "--object-store-memory", str(64 * 2**20)]
        worker += ["--include-dashboard", "false"]
        _run(worker, env)
        url = f"http://127.0.0.1:{dash_port}"
        client = JobSubmissionClient(url)
        program = tmp_path / "job.py"
        program.write_text(JOB)
        sid = client.submit_job(entrypoint=f"python {program}")
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, address, worker_root, str(gate)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert driver.stdout.readline().strip() == "counts [1, 2, 3]", driver.stderr.read()
        assert driver.stdout.readline().strip() == "running"
        wait_until(
            lambda: "job started" in client.get_job_logs(sid), 90, 0.2, "the job's entrypoint"
        )
        old_nodes = {n["node_id"]: n for n in _status(address, env)["active_nodes"]}
        assert len(old_nodes) == 2

        # The head machine dies: every one of its processes at once.
        doomed = _head_processes(head_root)
        assert len(doomed) >= 5, doomed  # GCS, raylet, dashboard, zygote, workers...
        for p in doomed:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        gone, alive = psutil.wait_procs(doomed, timeout=20)
        assert not alive, alive
        start = time.monotonic()
        out = _run(head, env)
        # The same token: the new head kept the one stored with the cluster's state.
        assert f"--token={token}" in out, out

        # The worker node rejoins under its own id; the old head is declared dead.
        def rejoined() -> dict | None:
            s = _status(address, env)
            worker_ids = [i for i, n in old_nodes.items() if not n["is_head"]]
            active = {n["node_id"] for n in s["active_nodes"]}
            return s if len(active) == 2 and set(worker_ids) <= active else None

        summary = wait_until(rejoined, 60, 0.5, "the worker node to rejoin the new head")
        took = time.monotonic() - start
        assert took < 60, took
        # The driver of the worker node carried on: its tasks that ran across finish.
        gate.touch()
        assert driver.stdout.readline().strip() == "finished [0, 10]", driver.stderr.read()
        assert driver.stdout.readline().strip() == "new 70"
        assert driver.wait(30) == 0
        # A new driver finds the detached actor by name, with its state; new tasks run.
        after = json.loads(_run([sys.executable, "-c", AFTER, address, worker_root], env))
        assert after == {"count": 4, "tasks": [1, 2, 3, 4]}
        # The job whose entrypoint died with the head is FAILED, saying why (not RUNNING).
        wait_until(
            lambda: client.get_job_status(sid) in (JobStatus.FAILED, JobStatus.SUCCEEDED),
            90,
            0.5,
            "the job to be reported ended",
        )
        info = client.get_job_info(sid)
        assert info.status == JobStatus.FAILED, info
        head_id = next(i for i, n in old_nodes.items() if n["is_head"])
        said = f"Job failed: the head node {head_id} (127.0.0.1), where its entrypoint ran, died"
        assert info.message.startswith(said), info.message
        assert "did not reconnect" in info.message, info.message
        dead = wait_until(
            lambda: [n for n in _status(address, env)["dead_nodes"] if n["node_id"] in old_nodes],
            30,
            0.5,
            "the old head listed dead",
        )
        assert "did not reconnect" in dead[0]["death_reason"], dead
        assert summary
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.communicate()
        # Both nodes' stops at once: they touch disjoint processes and directories.
        stops = [
            subprocess.Popen(
                [ember_cli(), "stop", "--force", "--temp-dir", r],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for r in (worker_root, head_root)
        ]
        for stop in stops:
            stop.wait(timeout=90)
        left = find_ember_processes(head_root) + find_ember_processes(worker_root)
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"processes left behind: {left}"
