"""The head of a cluster ``ember up`` started, as ``exec``, ``submit``, ``attach``,
``rsync-up``/``rsync-down``, ``get-head-ip``, ``get-worker-ips``, ``monitor`` and ``dashboard``
reach it: a ``LocalHead`` (fake_multinode, slurm: the head runs on this machine) or a
``remote_head.RemoteHead`` (local: over SSH), with the same methods."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ember.autoscaler.command_runner import tmux_socket
from ember.autoscaler.launcher import (
    STOP_TIMEOUT_S,
    LauncherError,
    checked,
    head_node,
    paths_for,
    read_raw,
    read_record,
    with_overrides,
)

__all__ = ["LocalHead", "read_status", "running_head", "tmux_socket", "worker_ips"]


def _address(head: Mapping[str, Any]) -> str:
    return str(head["gcs_address"]).removeprefix("tcp:")


class LocalHead:
    """A head on this machine (fake_multinode, slurm): its node.json; commands run here in
    the head's temp dir with ``EMBER_ADDRESS`` (and the token) in their environment."""

    python = sys.executable

    def __init__(self, node: Mapping[str, Any], cluster_name: str) -> None:
        self.cluster_name = cluster_name
        self.node = dict(node)
        self.ip = str(node["node_ip"])
        self.address = _address(node)
        self.workdir = os.path.dirname(node["session_dir"])

    def run(self, cmd: str | Sequence[str], tty: bool = False) -> int:
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        return subprocess.call(argv, env=head_env(self.node), cwd=self.workdir)

    def shell(self) -> int:
        return self.run([os.environ.get("SHELL") or "/bin/sh"])

    def put(self, source: str, target: str) -> None:
        from ember.autoscaler.command_runner import LocalCommandRunner

        LocalCommandRunner().put(source, target, timeout=STOP_TIMEOUT_S)

    get = put  # both ends are this machine

    def gcs_call(self, op: str, body: Any = None) -> Any:
        return gcs_call(self.node, op, body)

    def forward(self, port: int) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()  # the head's ports are this machine's

    def open_dashboard(self) -> tuple[str, Any]:
        """(the dashboard's URL here, what to close when done: nothing for a local head)."""
        return str((self.node.get("dashboard") or {}).get("url") or ""), None

    def tail_monitor(self, lines: int, follow: bool) -> int:
        path = monitor_log(self.node)
        if not os.path.exists(path):
            raise LauncherError(f"{path}: the autoscaler has written no log yet")
        try:
            tail(path, lines, follow, print)
        except KeyboardInterrupt:
            pass
        return 0


def running_head(config_path: str, cluster_name: str | None = None) -> Any:
    """The head of the cluster this config names (a ``LocalHead`` or a ``RemoteHead``), or
    LauncherError saying to ``ember up``."""
    raw = with_overrides(read_raw(config_path), cluster_name=cluster_name)
    name = str(raw.get("cluster_name") or "default")
    paths = paths_for(name)
    record = read_record(paths)
    if record and record.get("provider") == "local":
        from ember.autoscaler.remote_head import RemoteError, RemoteHead

        try:
            with open(paths.token) as f:
                return RemoteHead(checked(raw, config_path), record, f.read().strip())
        except (OSError, RemoteError) as e:
            raise LauncherError(f"cluster {name}: {e}") from None
    head = head_node(paths)
    if head is None:
        raise LauncherError(
            f"cluster {name} is not running: start it with `ember up {config_path}`"
        )
    return LocalHead(head, name)


def head_env(head: Mapping[str, Any]) -> dict[str, str]:
    """The environment a command on the head runs in: ``ember.init()`` there joins the
    cluster (the token by environment, never argv)."""
    env = dict(os.environ)
    env["EMBER_ADDRESS"] = _address(head)
    token_file = head.get("token_file")
    if token_file and os.path.exists(token_file):
        with open(token_file) as f:
            env["EMBER_TOKEN"] = f.read().strip()
    return env


def worker_ips(config_path: str, cluster_name: str | None = None) -> list[str]:
    """The addresses of the worker nodes the cluster's provider runs now."""
    info = running_head(config_path, cluster_name).gcs_call("cluster_info")
    return sorted(
        n.get("node_ip", "")
        for n in info.get("nodes") or ()
        if n.get("state") == "ALIVE" and not n.get("is_head")
    )


def gcs_call(head: Mapping[str, Any], op: str, body: Any = None) -> Any:
    """One call to a local head's GCS, with the cluster token from its session."""
    from ember.autoscaler.monitor import GcsLink

    token = head_env(head).get("EMBER_TOKEN")
    link = GcsLink(str(head["gcs_address"]), token.encode() if token else None)
    try:
        return link.call(op, body)
    finally:
        link.close()


def read_status(head: Any) -> dict[str, Any]:
    """The autoscaler's last status record on the head ({} before its first tick)."""
    raw = head.gcs_call("kv_get", {"namespace": "autoscaler", "key": b"status"})
    return json.loads(raw) if raw else {}


def monitor_log(head: Mapping[str, Any]) -> str:
    """The autoscaler's log on the head (its logging goes to the supervised process's
    standard error)."""
    return os.path.join(head["session_dir"], "logs", "monitor.err")


def tail(path: str, lines: int, follow: bool, write: Callable[[str], None]) -> None:
    """The last ``lines`` lines of ``path``, then (``follow``) what is added, until Ctrl-C."""
    with open(path, errors="replace") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 256 * 1024))  # a bound: the tail of a long log, not all of it
        for line in f.read().splitlines()[-lines:]:
            write(line)
        while follow:
            line = f.readline()
            if line:
                write(line.rstrip("\n"))
            else:
                time.sleep(0.2)
