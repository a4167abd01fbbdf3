"""Clusters of several nodes on one machine, for tests (like Ray's ``ray.cluster_utils``).

Every node is a real set of processes (a raylet, and on the head a GCS) with its own temp dir,
ports and resources, joined over TCP with the cluster token exactly as ``ember start`` joins
machines. Nodes can be added and removed (gracefully, or killed like a crashed machine)::

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    worker = cluster.add_node(num_cpus=2, resources={"accel": 1})
    cluster.connect()            # ember.init(address=...) through the head node
    ...
    cluster.remove_node(worker, allow_graceful=False)
    cluster.shutdown()
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

from ember.cluster_token import new_token
from ember.node import LocalNode
from ember.protocol import connection as conn_mod

_DEFAULT_STORE = 256 * 1024 * 1024


class Cluster:
    def __init__(
        self,
        initialize_head: bool = False,
        connect: bool = False,
        head_node_args: dict[str, Any] | None = None,
        *,
        temp_root: str | None = None,
        node_ip: str = "127.0.0.1",
        env: dict[str, str] | None = None,
    ) -> None:
        """``env`` reaches every node's processes, e.g. ``{"EMBER_NODE_DEATH_TIMEOUT": "2"}``."""
        self._own_root = temp_root is None
        self.temp_root = temp_root or tempfile.mkdtemp(prefix="ember-cluster-", dir="/tmp")
        self.node_ip = node_ip
        self.env = dict(env or {})
        self.token = new_token()
        self.head_node: LocalNode | None = None
        self.worker_nodes: list[LocalNode] = []
        self.removed_nodes: list[LocalNode] = []
        self._count = 0
        self.connected = False
        if initialize_head:
            self.add_node(**(head_node_args or {}))
            if connect:
                self.connect()

    # -- nodes -----------------------------------------------------------------------------
    @property
    def address(self) -> str:
        """``HOST:PORT`` of the head's GCS (what ``ember start --address`` takes)."""
        if self.head_node is None:
            raise RuntimeError("the cluster has no head node yet: call add_node() first")
        return self.head_node.gcs_address[len("tcp:") :]

    def add_node(
        self,
        wait: bool = True,
        *,
        num_cpus: float = 1,
        num_gpus: float | None = None,
        resources: dict[str, float] | None = None,
        object_store_memory: int = _DEFAULT_STORE,
        memory: float | None = 1024**3,
        node_ip: str | None = None,
        env: dict[str, str] | None = None,
        prestart: int | None = None,
        labels: dict[str, str] | None = None,
        gcs_storage: str = "",
        dashboard_port: int | None = None,
    ) -> LocalNode:
        """Starts a node (the first one is the head); waits until the GCS lists it.
        ``gcs_storage``: the head's GCS storage (``ember.gcs.storage``; default SQLite);
        ``dashboard_port``: the head's dashboard port (default 8265, or the next free one)."""
        self._count += 1
        head = self.head_node is None
        temp_dir = os.path.join(self.temp_root, f"node{self._count}")
        node = LocalNode(
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            resources=resources,
            labels=labels,
            memory=memory,
            object_store_memory=object_store_memory,
            temp_dir=temp_dir,
            head=head,
            gcs_address=None if head else self.head_node.gcs_address,
            node_ip=node_ip or self.node_ip,
            cluster=True,
            token=self.token,
            env={**self.env, **(env or {})},
            prestart=prestart,
            gcs_storage=gcs_storage if head else "",
            dashboard_port=dashboard_port if head else None,
        )
        node.start()
        if head:
            self.head_node = node
        else:
            self.worker_nodes.append(node)
        if wait:
            self.wait_for_nodes()
        return node

    def remove_node(self, node: LocalNode, allow_graceful: bool = True) -> None:
        """Stops a node; ``allow_graceful=False`` kills it (SIGKILL) like a crashed machine."""
        if allow_graceful:
            node.stop()
        else:
            node.kill()
        if node in self.worker_nodes:
            self.worker_nodes.remove(node)
        if node is self.head_node:
            self.head_node = None
        self.removed_nodes.append(node)

    def list_all_nodes(self) -> list[LocalNode]:
        nodes = [self.head_node] if self.head_node else []
        return nodes + list(self.worker_nodes)

    # -- the GCS's view --------------------------------------------------------------------
    def gcs_call(self, op: str, body: Any = None, timeout: float = 10.0) -> Any:
        """One call to the head's GCS over TCP, with the token (as any remote tool would)."""
        return self._call(self.head_node.gcs_address, "gcs", op, body, timeout)

    def raylet_call(self, node: LocalNode, op: str, body: Any = None, timeout: float = 10.0) -> Any:
        """One call to a node's raylet (``node_stats``, say), as the node's own tools make."""
        return self._call(node.raylet_address, "raylet", op, body, timeout)

    def _call(self, address: str, name: str, op: str, body: Any, timeout: float) -> Any:
        async def call() -> Any:
            conn = await conn_mod.connect(address, name=name, token=self.token, timeout=timeout)
            try:
                return await conn.call(op, body, timeout=timeout)
            finally:
                conn.close()

        loop = conn_mod.new_event_loop()
        try:
            return loop.run_until_complete(call())
        except TimeoutError:
            log = os.path.join(self.head_node.session_dir, "logs", "gcs_server.log")
            tail = _tail(log)
            raise TimeoutError(
                f"the GCS did not answer {op!r} in {timeout:g} s; {log}:\n{tail}"
            ) from None
        finally:
            loop.close()

    def alive_node_ids(self) -> set[bytes]:
        return {n["node_id"] for n in self.gcs_call("list_nodes") if n["state"] == "ALIVE"}

    def wait_for_nodes(self, timeout: float = 30.0) -> None:
        """Until the GCS lists this cluster's running nodes as alive and every raylet's view
        (which it learns from its heartbeats) has the others, so work can be placed on them."""
        nodes = self.list_all_nodes()
        want = {n.node_id for n in nodes}
        deadline = time.monotonic() + timeout
        while True:
            have = self.alive_node_ids()
            if want <= have and all(self._sees_the_others(n, want) for n in nodes):
                return
            if time.monotonic() > deadline:
                missing = [n.hex()[:12] for n in want - have]
                raise TimeoutError(
                    f"within {timeout:g} s, nodes {missing} did not register with the GCS"
                    if missing
                    else f"within {timeout:g} s, the raylets' views did not all show every node"
                )
            time.sleep(0.05)

    def _sees_the_others(self, node: LocalNode, want: set[bytes]) -> bool:
        stats = self.raylet_call(node, "node_stats", {})
        return want - {node.node_id} <= set(stats.get("view_node_ids") or ())

    # -- drivers ---------------------------------------------------------------------------
    def connect(self, node: LocalNode | None = None, **init_kwargs: Any) -> Any:
        """``ember.init`` through ``node`` (default: the head), as a driver on that machine."""
        import ember

        node = node or self.head_node
        # Every node placeable from every raylet first, as a test that adds nodes and then
        # submits work means it: a node is in a raylet's view only after a heartbeat.
        self.wait_for_nodes()
        ctx = ember.init(
            address=self.head_node.gcs_address,
            temp_dir=os.path.dirname(node.session_dir),
            **init_kwargs,
        )
        self.connected = True
        return ctx

    def shutdown(self) -> None:
        """Disconnects the driver, stops every node, removes the temp dirs."""
        import ember

        if self.connected:
            ember.shutdown()
            self.connected = False
        for node in reversed(self.list_all_nodes()):
            node.stop()
        self.worker_nodes.clear()
        self.head_node = None
        if self._own_root:
            shutil.rmtree(self.temp_root, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


class AutoscalingCluster:
    """A head plus an autoscaler that adds worker nodes as local processes when work waits,
    and removes them when idle (Ray's ``ray.cluster_utils.AutoscalingCluster``)::

        cluster = AutoscalingCluster(
            head_resources={"CPU": 1},
            worker_node_types={"cpu_node": {"resources": {"CPU": 2}, "node_config": {},
                                            "min_workers": 0, "max_workers": 2}},
            idle_timeout_minutes=1,
        )
        cluster.start()
        ember.init(address=cluster.address)
        ...
        cluster.shutdown()

    The autoscaler runs as its own process (``python -m ember.autoscaler.monitor``) with the
    ``fake_multinode`` provider: the runtime starts it, never imports it.
    """

    def __init__(
        self,
        head_resources: dict[str, float],
        worker_node_types: dict[str, dict[str, Any]],
        **config_kwargs: Any,
    ) -> None:
        self.head_resources = dict(head_resources)
        self.worker_node_types = {k: dict(v) for k, v in worker_node_types.items()}
        self.config_kwargs = dict(config_kwargs)
        self.cluster: Cluster | None = None
        self.monitor: Any = None  # subprocess.Popen
        self.address = ""

    def start(self, env: dict[str, str] | None = None, interval: float = 0.5) -> None:

        import yaml

        res = dict(self.head_resources)
        cpus = res.pop("CPU", 0)
        gpus = res.pop("GPU", None)
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": cpus, "num_gpus": gpus, "resources": res or None},
            env=env,
        )
        self.address = self.cluster.address
        root = self.cluster.temp_root
        nodes_dir = os.path.join(root, "as")  # short: Unix socket paths
        types = {"head": {"resources": self.head_resources, "node_config": {}, "max_workers": 0}}
        types.update(self.worker_node_types)
        config = {
            "cluster_name": "autoscaling-cluster",
            "max_workers": sum(int(t.get("max_workers", 0)) for t in types.values()),
            "provider": {
                "type": "fake_multinode",
                "gcs_address": self.address,
                "temp_dir": nodes_dir,
            },
            "available_node_types": types,
            "head_node_type": "head",
            **self.config_kwargs,
        }
        self.config_path = os.path.join(root, "cluster.yaml")
        with open(self.config_path, "w") as f:
            yaml.safe_dump(config, f)
        self._monitor_env = {
            **os.environ,
            **(env or {}),
            "EMBER_TOKEN": self.cluster.token.decode(),
        }
        self._interval = interval
        self.log_path = os.path.join(root, "autoscaler.log")
        self.start_monitor()

    def start_monitor(self) -> None:
        """Starts the autoscaler's process (again, after ``kill_monitor``): it reads its
        instance table back from the GCS."""
        import subprocess
        import sys

        argv = [sys.executable, "-m", "ember.autoscaler.monitor", "--config", self.config_path]
        argv += ["--address", self.address, "--interval", str(self._interval)]
        with open(self.log_path, "ab") as log:
            self.monitor = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=self._monitor_env
            )

    def kill_monitor(self) -> None:
        """SIGKILLs the autoscaler's process, as a crash would end it (tests)."""
        if self.monitor is not None:
            self.monitor.kill()
            self.monitor.wait(timeout=10)
            self.monitor = None

    def status(self) -> dict[str, Any] | None:
        """The autoscaler's last status record (the GCS KV's ``autoscaler``/``status``)."""
        import json

        raw = self.cluster.gcs_call("kv_get", {"namespace": "autoscaler", "key": b"status"})
        return json.loads(raw) if raw else None

    def shutdown(self) -> None:
        """Stops the autoscaler, then every node it started, then the head."""
        import subprocess
        import sys

        if self.monitor is not None:
            self.monitor.terminate()
            try:
                self.monitor.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.monitor.kill()
                self.monitor.wait(timeout=10)
            self.monitor = None
        if self.cluster is not None:
            nodes_dir = os.path.join(self.cluster.temp_root, "as")
            if os.path.isdir(nodes_dir):  # every node it made lives under this directory
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "ember.cli.main",
                        "stop",
                        "--force",
                        "--temp-dir",
                        nodes_dir,
                    ],
                    capture_output=True,
                    timeout=60,
                )
            self.cluster.shutdown()
            self.cluster = None


def _tail(path: str, n: int = 30) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return f"(unreadable: {e})"
