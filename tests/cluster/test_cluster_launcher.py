"""The issue's "done when" walk, as a new user types it: ``ember up`` a fake_multinode
cluster.yaml, a workload needing 8 CPUs on a 2-CPU head scales the cluster up and finishes,
the cluster shrinks back after the idle timeout, ``ember down`` leaves no process and no
shared-memory file. On the way: ``up`` again is a no-op and a changed config reaches the
head's autoscaler live; the autoscaler, SIGKILLed, is started again by the head's raylet;
``exec``, ``submit``, ``get-head-ip``, ``get-worker-ips``, ``monitor``, ``dashboard``,
``rsync-up``/``rsync-down`` answer.

One test (about a minute): every step needs the cluster the step before left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile

import psutil
import yaml
from ember.autoscaler import heads
from ember_test_utils import REPO_ROOT, wait_until
from launcher_cli import ember, ok

FAST = {"EMBER_HEARTBEAT_INTERVAL": "0.2", "EMBER_NODE_DEATH_TIMEOUT": "2"}
WORKLOAD = """
import time, ember
ember.init()

@ember.remote(num_cpus=2)
def work(i):
    time.sleep(3)
    return ember.get_runtime_context().get_node_id()

nodes = ember.get([work.remote(i) for i in range(4)], timeout=300)
print("done", len(nodes), "tasks on", len(set(nodes)), "nodes")
"""


def _status(config: str) -> dict:
    """The autoscaler's record in the head's GCS KV (what ``ember status`` reads)."""
    return heads.read_status(heads.running_head(config))


def _workers(config: str) -> list[str]:
    """What ``ember get-worker-ips`` prints, asked in this process: polled often, a CLI
    process per poll would cost a second each."""
    return heads.worker_ips(config)


def test_up_scale_up_shrink_down(tmp_path, monkeypatch) -> None:
    up_dir = tempfile.mkdtemp(prefix="eu-", dir="/tmp")  # short: Unix socket paths
    monkeypatch.setenv("EMBER_UP_DIR", up_dir)  # for this process's launcher calls too
    env = {**os.environ, **FAST}
    with open(REPO_ROOT / "examples" / "clusters" / "fake.yaml") as f:
        raw = yaml.safe_load(f)
    raw["cluster_name"] = f"walk{os.getpid()}"
    raw["idle_timeout_minutes"] = 0.05  # 3 s, for the test
    config = str(tmp_path / "cluster.yaml")
    with open(config, "w") as f:
        yaml.safe_dump(raw, f)
    root = os.path.join(up_dir, raw["cluster_name"])
    try:
        out = ok(ember(env, "up", config, "-y"))
        assert f"Cluster {raw['cluster_name']} is up: address 127.0.0.1:" in out
        assert "is up to date" in ok(ember(env, "up", config, "-y"))  # idempotent
        assert ok(ember(env, "get-head-ip", config)).strip() == "127.0.0.1"
        assert ok(ember(env, "get-worker-ips", config)).strip() == ""
        url = ok(ember(env, "dashboard", config)).strip()
        assert url.startswith("http://127.0.0.1:")

        # The head's raylet keeps the autoscaler running: killed, it is started again.
        first = wait_until(lambda: _status(config).get("monitor_pid"), timeout=60)
        os.kill(first, signal.SIGKILL)
        wait_until(
            lambda: _status(config).get("monitor_pid") not in (None, first),
            timeout=60,
            message="the head never restarted its autoscaler",
        )

        # 8 CPUs of work on a 2-CPU head: workers come, the work finishes.
        script = tmp_path / "workload.py"
        script.write_text(WORKLOAD)
        out = ok(ember(env, "submit", config, str(script), timeout=300))
        assert "done 4 tasks on" in out
        st = _status(config)
        launches = [d for d in st["decisions"] if d["action"] == "launch"]
        if not launches or {d["node_type"] for d in launches} != {"cpu_worker"}:
            seen = ok(ember(env, "monitor", config, "--no-follow", "--lines", "60"))
            raise AssertionError(json.dumps(st["decisions"], indent=1) + "\n" + seen)
        assert st["counters"]["started"] >= 1 and st["counters"]["failed_create"] == 0
        log = ok(ember(env, "monitor", config, "--no-follow", "--lines", "500"))
        assert "launch" in log and "cpu_worker" in log

        # Idle past 3 s, every worker goes (min_workers 0); the head stays.
        wait_until(
            lambda: _workers(config) == [],
            timeout=90,
            message="the workers were never removed",
        )

        # A changed config reaches the running autoscaler without a restart.
        raw["available_node_types"]["cpu_worker"]["min_workers"] = 1
        with open(config, "w") as f:
            yaml.safe_dump(raw, f)
        assert "the new config reaches its autoscaler" in ok(ember(env, "up", config, "-y"))
        wait_until(
            lambda: _workers(config) == ["127.0.0.1"],
            timeout=90,
            message="min_workers 1 never brought a worker",
        )
        assert ok(ember(env, "get-worker-ips", config)).strip() == "127.0.0.1"

        # Files go up to the head and come back (the head is this machine).
        src = tmp_path / "data.txt"
        src.write_text("payload")
        on_head = os.path.join(root, "data.txt")
        ok(ember(env, "rsync-up", config, str(src), on_head))
        ok(ember(env, "rsync-down", config, on_head, str(tmp_path / "back.txt")))
        assert (tmp_path / "back.txt").read_text() == "payload"
        assert ok(ember(env, "exec", config, "echo $EMBER_ADDRESS")).startswith("127.0.0.1:")

        arenas = _arena_files(root)
        assert arenas  # the head's and the worker's shared memory
        out = ok(ember(env, "down", config, "-y"))
        assert f"Cluster {raw['cluster_name']} is down" in out
        assert _processes_under(root) == []
        assert [a for a in arenas if os.path.exists(a)] == []
        assert not os.path.exists(root)
        assert "is not running" in ok(ember(env, "down", config, "-y"))  # idempotent
    finally:
        if os.path.isdir(root):
            ember(env, "down", config, "-y")
        shutil.rmtree(up_dir, ignore_errors=True)


def _arena_files(root: str) -> list[str]:
    """The shared-memory files of every node under ``root`` (from each node.json)."""
    found = []
    for dirpath, _, files in os.walk(root):
        if "node.json" in files:
            with open(os.path.join(dirpath, "node.json")) as f:
                arena = json.load(f).get("arena_path")
            if arena:
                found.append(arena)
    return found


def _processes_under(root: str) -> list[str]:
    mine = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if root in cmd:
            mine.append(cmd[:200])
    return mine
