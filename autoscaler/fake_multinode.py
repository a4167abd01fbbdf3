"""``provider: {type: fake_multinode}``: worker nodes as local processes, for a laptop and for
tests. Each node is ``ember start --address HEAD --temp-dir ROOT/NODE_ID`` (the command a user
types), so its processes live under a directory of its own and ``ember stop --temp-dir`` of
that directory stops exactly them, never another node's or another cluster's.

provider fields: ``gcs_address`` (the head's HOST:PORT), ``temp_dir`` (where node directories
and the provider's own table go), and optionally ``token`` (the cluster token),
``node_ip`` (127.0.0.1), ``object_store_memory`` (bytes per node, 64 MiB).
The table of nodes made is a JSON file in ``temp_dir``, so a restarted autoscaler finds them.

A test hook: a node type whose ``node_config`` has ``test_never_join: true`` gets nodes the
provider records but never starts, as a machine whose Ember never registers (a bad image, a
firewall); the autoscaler's join timeout is what ends them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ember.autoscaler.demand import NODE_TYPE_LABEL
from ember.autoscaler.node_provider import TAG_USER_NODE_TYPE, StartsEmberNodes

START_TIMEOUT_S = 120.0  # ``ember start`` returns once its node registered, or fails
STOP_TIMEOUT_S = 60.0
STOP_GRACE_S = 1.0  # a drained node (no work) gets this long after SIGTERM, then SIGKILL
_TABLE = "fake_multinode_nodes.json"


def _ember(*args: str) -> list[str]:
    # The same interpreter, so a node runs the Ember this autoscaler runs.
    return [sys.executable, "-m", "ember.cli.main", *args]


class FakeMultiNodeProvider(StartsEmberNodes):
    # Each node's ``ember start`` waits mostly for its node to register: a burst of 20
    # started one after another took 20 starts' time. The table is behind a lock.
    launches_in_parallel = True

    def __init__(self, provider_config: Mapping[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        self._lock = threading.RLock()
        self._stopping: set[str] = set()  # nodes whose stop runs in the background
        missing = [k for k in ("gcs_address", "temp_dir") if not provider_config.get(k)]
        if missing:
            raise ValueError(f"provider (fake_multinode) needs {', '.join(missing)}")
        self.gcs_address = str(provider_config["gcs_address"])
        self.root = os.path.abspath(str(provider_config["temp_dir"]))
        token = provider_config.get("token")
        self.token = token.decode() if isinstance(token, bytes) else token
        self.node_ip = str(provider_config.get("node_ip", "127.0.0.1"))
        self.store_bytes = int(provider_config.get("object_store_memory", 64 * 2**20))
        os.makedirs(self.root, exist_ok=True)
        self._path = os.path.join(self.root, _TABLE)
        self.nodes: dict[str, dict[str, Any]] = {}
        if os.path.exists(self._path):
            with open(self._path) as f:
                self.nodes = json.load(f)
            self._resume_starts()

    def _resume_starts(self) -> None:
        """A monitor killed between recording a node and starting it left a node that would
        never join (the restarted monitor would wait out its join timeout, then back the
        type off): its ``ember start`` runs now. A start still running is kept by its pid
        (so terminate_node can end it); a node whose processes run is started."""
        for node_id, record in self.nodes.items():
            if record.get("started", True) or record.get("never_started"):
                continue
            pids = _pids_naming(record["temp_dir"])
            starts = [pid for pid, cmdline in pids if b"start" in cmdline.split(b"\0")]
            if starts:
                record["start_pid"] = starts[0]
            elif pids:
                record["started"] = True
                record.pop("start_pid", None)
            elif record.get("argv"):
                starter = self._spawn(node_id, record)
                threading.Thread(
                    target=self._finish_quietly,
                    args=(node_id, record, starter),
                    name=f"start-{node_id}",
                    daemon=True,
                ).start()
        self._save()

    def _finish_quietly(self, node_id: str, record: dict, starter: subprocess.Popen) -> None:
        try:
            self._finish(node_id, record, starter)
        except RuntimeError as e:  # the join timeout fails the instance; said here too
            print(f"fake_multinode: {e}", file=sys.stderr, flush=True)

    def _save(self) -> None:
        with self._lock:
            tmp = self._path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.nodes, f)
            os.replace(tmp, self._path)  # never a half-written table

    def non_terminated_nodes(self, tag_filters: Mapping[str, str]) -> list[str]:
        with self._lock:  # a background stop may drop nodes meanwhile
            nodes = list(self.nodes.items())
        return [
            node_id
            for node_id, node in nodes
            if all(node["tags"].get(k) == v for k, v in tag_filters.items())
        ]

    def node_tags(self, node_id: str) -> dict[str, str]:
        return dict(self.nodes[node_id]["tags"])

    def set_node_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        with self._lock:
            self.nodes[node_id]["tags"].update(tags)
            self._save()

    def internal_ip(self, node_id: str) -> str:
        return self.nodes[node_id]["ip"]

    def create_node_with_resources_and_labels(
        self,
        node_config: Mapping[str, Any],
        tags: Mapping[str, str],
        count: int,
        resources: Mapping[str, float],
        labels: Mapping[str, str],
    ) -> dict[str, dict[str, Any]]:
        made = {}
        for _ in range(count):
            node_id = f"fake-{uuid.uuid4().hex[:8]}"  # short: Unix socket paths under it
            temp_dir = os.path.join(self.root, node_id)
            # The reconciler matches this node to its Ember node by this label.
            node_labels = {**labels, "ember.io/provider-node-id": node_id}
            if TAG_USER_NODE_TYPE in tags:
                node_labels[NODE_TYPE_LABEL] = tags[TAG_USER_NODE_TYPE]
            res = dict(resources)
            argv = _ember("start", "--address", self.gcs_address, "--temp-dir", temp_dir)
            argv += ["--node-ip-address", self.node_ip]
            argv += ["--num-cpus", str(res.pop("CPU", 0)), "--num-gpus", str(res.pop("GPU", 0))]
            if "memory" in res:
                argv += ["--memory", str(int(res.pop("memory")))]
            store = int(res.pop("object_store_memory", self.store_bytes))
            argv += ["--object-store-memory", str(store)]
            if res:
                argv += ["--resources", json.dumps(res)]
            if node_labels:
                argv += ["--labels", json.dumps(node_labels)]
            # Recorded before it starts: a crash mid-start still leaves a node to stop (or,
            # for a restarted monitor, to start: _resume_starts).
            record: dict[str, Any] = {
                "tags": dict(tags),
                "ip": self.node_ip,
                "temp_dir": temp_dir,
                "argv": argv,
                "started": False,
            }
            if node_config.get("test_never_join"):  # the test hook (see the module's docstring)
                record["never_started"] = True
            with self._lock:
                self.nodes[node_id] = record
                self._save()
            if record.get("never_started"):
                made[node_id] = dict(record)
                continue
            self._finish(node_id, record, self._spawn(node_id, record))
            made[node_id] = dict(record)
        return made

    def _spawn(self, node_id: str, record: dict) -> subprocess.Popen:
        # The token goes by environment, never argv: argv is readable by every local user.
        env = dict(os.environ)
        if self.token:
            env["EMBER_TOKEN"] = str(self.token)
        # Its output goes to a file and it runs in a session of its own: a monitor killed
        # mid-start must not take the start with it (a pipe to a dead reader, a signal to
        # the group), or the node the restarted monitor adopts never joins.
        with open(os.path.join(self.root, f"{node_id}.start.log"), "wb") as log:
            starter = subprocess.Popen(
                record["argv"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        # Its pid is kept while it runs: a monitor killed now leaves a start in flight,
        # which terminate_node (of the restarted monitor) must end before it stops the
        # node, or the node comes up after the stop, a worker nobody manages.
        with self._lock:
            record["start_pid"] = starter.pid
            self._save()
        return starter

    def _finish(self, node_id: str, record: dict, starter: subprocess.Popen) -> None:
        """Waits for the node's ``ember start``; a start that fails ends the node."""
        try:
            starter.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            starter.kill()
            starter.wait()
            self.terminate_node(node_id)
            raise RuntimeError(
                f"ember start for {node_id} did not finish in {START_TIMEOUT_S:.0f} s"
            ) from None
        with self._lock:
            record.pop("start_pid", None)
            record["started"] = starter.returncode == 0
            self._save()
        if starter.returncode != 0:
            self.terminate_node(node_id)
            log_path = os.path.join(self.root, f"{node_id}.start.log")
            with open(log_path, errors="replace") as f:
                tail = f.read().strip()[-2000:]
            raise RuntimeError(f"ember start for {node_id} failed: {tail}")

    def terminate_node(self, node_id: str) -> None:
        node = self.nodes.get(node_id)
        if node is None:
            return
        if node.get("start_pid"):
            _end_start(int(node["start_pid"]), node["temp_dir"])
        if node.get("never_started"):
            with self._lock:
                self.nodes.pop(node_id, None)
                self._save()
            return
        try:
            done = subprocess.run(
                _ember("stop", "--force", "--temp-dir", node["temp_dir"]),
                capture_output=True,
                text=True,
                timeout=STOP_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            # Kept in the table: the next tick asks again.
            raise RuntimeError(f"ember stop for {node_id} did not finish in time") from None
        if done.returncode != 0:
            raise RuntimeError(f"ember stop for {node_id} failed: {done.stderr.strip()[-2000:]}")
        with self._lock:
            self.nodes.pop(node_id, None)
            self._save()
        _forget_start_log(self.root, node_id)

    def terminate_nodes(self, node_ids: Sequence[str]) -> dict[str, Exception]:
        """A tick's stops, in one pass (``stop_sessions_under``) on a thread of their own:
        twenty ``ember stop`` runs took most of the way from idle to zero nodes, and a stop
        run in the tick held the next tick's drains for its SIGTERM grace. A node stays
        listed until its processes are gone; one whose stop fails is listed still, and the
        reconciler asks again."""
        with self._lock:
            known = [
                n for n in dict.fromkeys(node_ids) if n in self.nodes and n not in self._stopping
            ]
            self._stopping.update(known)
        if known:
            threading.Thread(
                target=self._stop_together, args=(known,), name="stop-nodes", daemon=True
            ).start()
        return {}

    def finish_stops(self, timeout: float) -> None:
        """Waits (up to ``timeout``) for the stops running in the background: a monitor
        that exits mid-stop would leave a killed node's shared memory behind."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._stopping:
                    return
            time.sleep(0.05)

    def _stop_together(self, known: list[str]) -> None:
        from ember.session_processes import stop_sessions_under

        try:
            for node_id in known:
                node = self.nodes[node_id]
                if node.get("start_pid"):  # a start in flight ends first (see terminate_node)
                    _end_start(int(node["start_pid"]), node["temp_dir"])
            dirs = {
                self.nodes[n]["temp_dir"]: n
                for n in known
                if not self.nodes[n].get("never_started")
            }
            left = stop_sessions_under(list(dirs), grace=STOP_GRACE_S)
            failed = {dirs[d] for d in left}
            for d, count in left.items():
                print(
                    f"fake_multinode: {count} process(es) of {dirs[d]} would not exit; "
                    "asked again next tick",
                    file=sys.stderr,
                    flush=True,
                )
            with self._lock:
                for node_id in known:
                    if node_id not in failed:
                        self.nodes.pop(node_id, None)
                self._save()
            for node_id in known:
                if node_id not in failed:
                    _forget_start_log(self.root, node_id)
        finally:
            with self._lock:
                self._stopping.difference_update(known)


def _forget_start_log(root: str, node_id: str) -> None:
    try:
        os.unlink(os.path.join(root, f"{node_id}.start.log"))
    except OSError:
        pass


def _pids_naming(temp_dir: str) -> list[tuple[int, bytes]]:
    """(pid, command line) of every process whose command line names the node's directory:
    its ``ember start``, or the node's own processes (their ``--session-dir`` is in it)."""
    out = []
    needle = temp_dir.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if needle in cmdline:
            out.append((int(entry), cmdline))
    return out


def _end_start(pid: int, temp_dir: str) -> None:
    """SIGKILLs a node's ``ember start`` if it still runs (its command line names the node's
    directory, so a reused pid is left alone), and waits a moment for it to go."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if temp_dir.encode() not in f.read():
                return
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + 5.0
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)  # ours (not a restarted monitor's): reap it
        except ChildProcessError:
            pass
        time.sleep(0.02)
