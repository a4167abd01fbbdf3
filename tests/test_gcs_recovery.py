"""Head recovery with real processes: the head's GCS is SIGKILLed mid-workload (tasks
running, an actor holding state, a named detached actor, a placement group); the head's
raylet starts it again, it reads its tables back, and everything reconnects. The user's
view: the actor kept its state and answered during the outage, its name still resolves,
the group is still CREATED, new tasks and actors work (a creation sent during the outage
waits for the new GCS), the job is never FAILED, and no process is left over. Past the
reconnect timeout with no GCS coming back, every process exits on its own and says why."""

from __future__ import annotations

import json
import os
import signal
import time

import ember
import psutil
import pytest
from ember import config
from ember.cluster_utils import Cluster
from ember.session_processes import find_ember_processes
from ember_test_utils import (
    COUNTER_SOURCE,
    GCS_RESTART_ENV,
    gcs_processes,
    gcs_restart_cluster,
    kill_the_gcs,
    redis_server,
    wait_until,
)

FAST = GCS_RESTART_ENV


@ember.remote
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def inc(self) -> int:
        self.n += 1
        return self.n


@ember.remote
def slow(x: int, seconds: float) -> int:
    time.sleep(seconds)
    return x * 10


@pytest.fixture(params=["sqlite", "redis"])
def storage(request, tmp_path):
    if request.param == "sqlite":
        yield ""  # the default: a SQLite file in the session directory
    else:
        with redis_server(str(tmp_path)) as url:
            yield url


def test_a_killed_gcs_comes_back_with_everything_the_user_was_promised(storage, monkeypatch):
    monkeypatch.setattr(config, "gcs_reconnect_timeout", 30.0)  # this process is the driver
    if ember.is_initialized():
        ember.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "gcs_storage": storage},
        env=FAST,
    )
    root = cluster.temp_root
    try:
        cluster.add_node(num_cpus=1)
        cluster.connect()
        keeper = Counter.options(name="keeper", lifetime="detached", max_restarts=-1).remote()
        assert [ember.get(keeper.inc.remote(), timeout=30) for _ in range(3)] == [1, 2, 3]
        pg = ember.util.placement_group([{"CPU": 1}], strategy="PACK")
        assert pg.wait(30)
        running = [slow.remote(i, 2.0) for i in range(2)]
        job_id = ember.get_runtime_context().get_job_id()
        [old] = gcs_processes(root)

        start = time.monotonic()
        old.send_signal(signal.SIGKILL)
        old.wait(10)
        # A live actor answers during the outage: its callers reach its worker directly.
        assert ember.get(keeper.inc.remote(), timeout=10) == 4
        # A new actor sent during the outage waits for the new GCS instead of failing.
        fresh = Counter.remote()
        assert ember.get(fresh.inc.remote(), timeout=60) == 1
        recovered = time.monotonic() - start
        assert recovered < 20, f"recovery took {recovered:.1f} s"

        [new] = wait_until(lambda: gcs_processes(root), timeout=30, message="a new GCS")
        assert new.pid != old.pid and not psutil.pid_exists(old.pid)
        # The tasks that were running finish; new tasks run.
        assert ember.get(running, timeout=60) == [0, 10]
        assert ember.get(slow.remote(7, 0.0), timeout=60) == 70
        # The detached actor's name resolves to the same actor, with its state.
        again = ember.get_actor("keeper")
        assert ember.get(again.inc.remote(), timeout=30) == 5
        actors = {a["name"]: a for a in cluster.gcs_call("list_actors")}
        assert actors["keeper"]["state"] == "ALIVE" and actors["keeper"]["num_restarts"] == 0
        # The group is still CREATED on the node it was on.
        table = cluster.gcs_call("get_placement_group", {"pg_id": pg.id_bytes})
        assert table["state"] == "CREATED" and len(table["bundle_nodes"]) == 1
        # Both nodes reconnected under their own ids; nobody was declared dead.
        nodes = cluster.gcs_call("list_nodes")
        assert sorted(n["state"] for n in nodes) == ["ALIVE", "ALIVE"]
        assert {n["node_id"] for n in nodes} == {n.node_id for n in cluster.list_all_nodes()}
        # The dashboard's process list names the new process as the gcs_server.
        import httpx

        def gcs_rows() -> list[int]:
            r = httpx.get(
                f"{cluster.head_node.dashboard_url}/api/workers",
                params={"filter": ["kind=gcs_server"]},
                timeout=30,
            )
            return [w["pid"] for w in r.json()["items"]] if r.status_code == 200 else []

        wait_until(lambda: gcs_rows() == [new.pid], timeout=30, message="the new gcs_server row")
        # The job runs on; a GCS restart never ends it.
        [job] = [j for j in cluster.gcs_call("list_jobs") if j["job_id"].hex() == job_id]
        assert job["state"] == "RUNNING"
        ember.shutdown()
        cluster.connected = False
        [job] = [j for j in cluster.gcs_call("list_jobs") if j["job_id"].hex() == job_id]
        assert job["state"] == "FINISHED" and job["finished_by_driver"] is True
    finally:
        cluster.shutdown()
    left = wait_until(lambda: not find_ember_processes(root), timeout=20, message="no leftovers")
    assert left


JOB_PROGRAM = """
import sys, time, ember
ember.init()

@ember.remote
def add_one(x):
    return x + 1

print("before", ember.get(add_one.remote(1), timeout=60), flush=True)
gate = sys.argv[1]
deadline = time.monotonic() + 60
while not __import__("os").path.exists(gate) and time.monotonic() < deadline:
    time.sleep(0.1)  # the test kills the GCS meanwhile, and it comes back
print("after", ember.get(add_one.remote(2), timeout=60), flush=True)
"""


def test_a_submitted_job_running_across_a_gcs_restart_succeeds(tmp_path):
    """A job of the Jobs API whose driver runs while the GCS is killed and comes back ends
    SUCCEEDED, with both halves of its output: a restart never fails a job."""
    from ember.job_submission import JobStatus, JobSubmissionClient

    if ember.is_initialized():
        ember.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2}, env=FAST)
    root = cluster.temp_root
    try:
        client = JobSubmissionClient(cluster.head_node.dashboard_url)
        program = tmp_path / "job.py"
        program.write_text(JOB_PROGRAM)
        gate = tmp_path / "gate"
        sid = client.submit_job(entrypoint=f"python {program} {gate}")
        wait_until(
            lambda: "before 2" in client.get_job_logs(sid),
            timeout=60,
            message="the job's first task",
        )
        [old] = gcs_processes(root)
        old.kill()
        old.wait(10)
        wait_until(
            lambda: [p for p in gcs_processes(root) if p.pid != old.pid],
            timeout=30,
            message="a new GCS",
        )
        gate.touch()
        wait_until(
            lambda: client.get_job_status(sid) in (JobStatus.SUCCEEDED, JobStatus.FAILED),
            timeout=90,
            interval=0.2,
            message="the job to end",
        )
        logs = client.get_job_logs(sid)
        assert client.get_job_status(sid) == JobStatus.SUCCEEDED, logs[-3000:]
        assert "before 2" in logs and "after 3" in logs
        drivers = [j for j in cluster.gcs_call("list_jobs") if j.get("submission_id") == sid]
        assert [(j["state"], j["finished_by_driver"]) for j in drivers] == [("FINISHED", True)]
    finally:
        cluster.shutdown()
    wait_until(lambda: not find_ember_processes(root), timeout=20, message="no leftovers")


def test_past_the_reconnect_timeout_every_process_exits_and_says_why(monkeypatch):
    """The head's raylet is killed with its GCS, so nothing starts the GCS again: the worker
    node and the head's dashboard give up after the reconnect timeout, no orphans left."""
    if ember.is_initialized():
        ember.shutdown()
    env = dict(FAST, EMBER_GCS_RECONNECT_TIMEOUT="3")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1}, env=env)
    root = cluster.temp_root
    try:
        worker = cluster.add_node(num_cpus=1)
        head = cluster.head_node
        assert "dashboard" in head.procs
        procs = [psutil.Process(p.pid) for p in worker.procs.values()]
        procs += psutil.Process(worker.procs["raylet"].pid).children(recursive=True)
        procs.append(psutil.Process(head.procs["dashboard"].pid))
        start = time.monotonic()
        for name in ("raylet", "gcs_server"):
            os.kill(head.procs[name].pid, signal.SIGKILL)
        gone, alive = psutil.wait_procs(procs, timeout=30)
        assert not alive, [(p.pid, p.name()) for p in alive]
        took = time.monotonic() - start
        assert 3 <= took < 25, took
        with open(os.path.join(worker.session_dir, "logs", "raylet.log")) as f:
            log = f.read()
        assert "could not reconnect to the GCS" in log and "within 3 s" in log, log[-2000:]
        assert "the node shuts down" in log
        with open(os.path.join(head.session_dir, "logs", "dashboard.log")) as f:
            log = f.read()
        assert "the head is gone; the dashboard exits" in log, log[-2000:]
        # Only the head's own leftovers (the node's zygote and workers die with its raylet).
        wait_until(lambda: not find_ember_processes(root), timeout=20, message="no orphans")
    finally:
        cluster.shutdown()


DRIVER_BEFORE = (
    """
import sys, ember
ember.init(address=sys.argv[1], namespace="app")

"""
    + COUNTER_SOURCE
    + """
Counter = ember.remote(Counter)

k = Counter.options(name="keeper", lifetime="detached", max_restarts=-1).remote()
print([ember.get(k.inc.remote(), timeout=30) for _ in range(3)])
"""
)

DRIVER_AFTER = """
import sys, ember
ember.init(address=sys.argv[1], namespace="app")
k = ember.get_actor("keeper")
print(ember.get(k.inc.remote(), timeout=60))
"""


def test_a_new_head_on_the_same_redis_finds_the_named_detached_actor(tmp_path):
    """The whole head dies (every process SIGKILLed); ``ember start --head --storage
    redis://...`` again reads the tables back: the old node is declared dead after the death
    timeout, its detached actor restarts on the new head (its memory died with the machine,
    as with Ray), and a new driver finds it by name."""
    import subprocess
    import sys
    import tempfile

    from ember_test_utils import ember_cli, free_port

    root = tempfile.mkdtemp(prefix="emb-redis-", dir="/tmp")  # short: Unix socket paths
    port = free_port()
    env = dict(os.environ, EMBER_NODE_DEATH_TIMEOUT="3", EMBER_GCS_RECONNECT_TIMEOUT="10")
    with redis_server(str(tmp_path)) as url:
        start = [ember_cli(), "start", "--head", "--port", str(port), "--num-cpus", "1"]
        start += ["--node-ip-address", "127.0.0.1", "--temp-dir", root, "--storage", url]
        start += ["--include-dashboard", "false", "--object-store-memory", str(64 * 2**20)]
        address = f"127.0.0.1:{port}"

        def run(argv: list[str]) -> str:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
            assert out.returncode == 0, out.stderr[-3000:]
            return out.stdout

        try:
            run(start)
            assert run([sys.executable, "-c", DRIVER_BEFORE, address]).strip() == "[1, 2, 3]"
            for p in find_ember_processes(root):  # the head machine is gone
                p.kill()
            wait_until(lambda: not find_ember_processes(root), timeout=20, message="head gone")
            run(start)
            assert run([sys.executable, "-c", DRIVER_AFTER, address]).strip() == "1"
            status = subprocess.run(
                [ember_cli(), "status", "--address", address, "--format", "json"],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
            )
            assert status.returncode == 0, status.stderr
            summary = json.loads(status.stdout)
            # The old head is listed dead, saying why; the new one runs the actor.
            assert len(summary["active_nodes"]) == 1
            [dead] = summary["dead_nodes"]
            assert "did not reconnect" in dead["death_reason"], dead
        finally:
            subprocess.run(
                [ember_cli(), "stop", "--force", "--temp-dir", root],
                capture_output=True,
                timeout=90,
            )
            left = find_ember_processes(root)
            import shutil

            shutil.rmtree(root, ignore_errors=True)
            assert not left, f"processes left behind: {left}"


def test_ember_start_block_outlives_a_gcs_restart(tmp_path):
    """``ember start --head --block`` watches its node's processes: a GCS the raylet starts
    again is not the node's end, and SIGTERM still stops everything."""
    import subprocess
    import tempfile

    from ember_test_utils import ember_cli, free_port

    root = tempfile.mkdtemp(prefix="emb-block-", dir="/tmp")
    port = free_port()
    argv = [ember_cli(), "start", "--head", "--port", str(port), "--num-cpus", "1", "--block"]
    argv += ["--node-ip-address", "127.0.0.1", "--temp-dir", root]
    argv += ["--include-dashboard", "false", "--object-store-memory", str(64 * 2**20)]
    log = open(tmp_path / "block.out", "w+")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True)

    def status_ok() -> bool:
        out = subprocess.run(
            [ember_cli(), "status", "--address", f"127.0.0.1:{port}", "--temp-dir", root],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.returncode == 0 and " 1 node_" in out.stdout

    try:
        wait_until(status_ok, timeout=90, interval=0.5, message="the head to answer")
        [old] = gcs_processes(root)
        old.kill()
        old.wait(10)
        wait_until(
            lambda: [p for p in gcs_processes(root) if p.pid != old.pid] and status_ok(),
            timeout=60,
            interval=0.5,
            message="a new GCS answering",
        )
        assert proc.poll() is None  # still in the foreground, the node still running
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        log.seek(0)
        assert "Stopping the node (SIGTERM)" in log.read()
        wait_until(lambda: not find_ember_processes(root), timeout=20, message="no leftovers")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        subprocess.run(
            [ember_cli(), "stop", "--force", "--temp-dir", root], capture_output=True, timeout=90
        )
        import shutil

        shutil.rmtree(root, ignore_errors=True)


@ember.remote
class Pinger:
    def ping(self) -> int:
        return os.getpid()


def node_worker_pids(raylet: psutil.Process) -> set[int]:
    """The worker processes of a node: its raylet's descendants but for its fork server and
    its agent (forked workers keep the fork server's command line)."""
    pids = set()
    for p in raylet.children(recursive=True):
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            line = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "ember.agent" in line or p.ppid() == raylet.pid and "zygote" in line:
            continue
        pids.add(p.pid)
    return pids


def test_an_actor_lease_granted_to_a_dead_gcs_leaves_no_worker_behind(monkeypatch):
    """The GCS asks a raylet for an actor's worker and is SIGKILLed before the reply: the
    raylet is stopped (SIGSTOP) while the request reaches it, so the grant can only come
    after the GCS died, the moment made certain. The new GCS knows nothing of that lease and
    places the actor again; the raylet ends the lease whose asker is gone (or, had the reply
    left before the GCS died, the new GCS ends it when the raylet registers again with its
    leases). The actor is ALIVE once, and no worker process is left beside its own."""
    with gcs_restart_cluster(monkeypatch, head_cpus=1) as cluster:
        # Room for two: a leaked lease would not stop the actor from being placed again,
        # so what the test sees is the extra worker, not a hang.
        far = cluster.add_node(num_cpus=1, resources={"far": 2})
        cluster.connect()
        raylet = psutil.Process(far.procs["raylet"].pid)
        before = node_worker_pids(raylet)
        raylet.suspend()
        try:
            actor = Pinger.options(num_cpus=0, resources={"far": 1}).remote()
            actor_id = actor._actor_id

            def lease_asked() -> bool:
                # Listed, and not waiting for a node: its lease request went to the raylet.
                rows = [a for a in cluster.gcs_call("list_actors") if a["actor_id"] == actor_id]
                waiting = cluster.gcs_call("cluster_info")["pending_actors"]
                return bool(rows) and rows[0]["state"] == "PENDING_CREATION" and not waiting

            wait_until(lease_asked, timeout=4, message="the GCS to ask the stopped raylet")
            kill_the_gcs(cluster.temp_root)
        finally:
            raylet.resume()

        pid = ember.get(actor.ping.remote(), timeout=60)
        [row] = [a for a in cluster.gcs_call("list_actors") if a["actor_id"] == actor_id]
        assert (row["state"], row["pid"], row["num_restarts"]) == ("ALIVE", pid, 0)

        def actor_workers() -> list[tuple[int, str]]:
            rows = cluster.raylet_call(far, "list_workers")
            return [(w["pid"], w["state"]) for w in rows if w.get("actor_id")]

        # One worker hosts an actor on that node: the actor's own. The orphan's is gone.
        wait_until(
            lambda: actor_workers() == [(pid, "ACTOR")],
            timeout=30,
            message=f"the actor's worker {pid} to be the only actor worker on the node",
        )

        def pids_agree() -> bool:
            listed = {w["pid"] for w in cluster.raylet_call(far, "list_workers")}
            return node_worker_pids(raylet) == listed

        # Every worker process on the node is one its raylet lists: none hides, leaked.
        wait_until(pids_agree, timeout=30, message="the node's processes to be its workers")
        assert pid in node_worker_pids(raylet) and pid not in before
        # The resource the lost lease held is back: one "far" in use, the actor's.
        stats = cluster.raylet_call(far, "node_stats")
        assert stats["resources_available"]["far"] == 1.0
