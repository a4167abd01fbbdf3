"""The cluster launcher behind ``ember up``/``down``/``exec``/``submit``/``attach``/
``rsync-up``/``rsync-down``/``get-head-ip``/``get-worker-ips``/``monitor``/``dashboard``
(Ray's ``ray up`` family), for a cluster.yaml.

What ``ember up`` started is recorded in a directory of the cluster's own,
``$TMPDIR/ember-up/<cluster_name>/``: ``cluster.yaml`` (the config the head's autoscaler
reads, re-read by it when it changes), ``head/`` (the head's ``--temp-dir``), ``w/`` (the
worker nodes' directories) and ``launcher.json`` (the head's address). ``ember down`` stops
exactly the processes under that directory, removes its shared-memory files with them and
then the directory: nothing another cluster runs is touched.

Providers: ``fake_multinode`` (the head and its workers are processes on this machine).
Remote providers need the head started on another machine through a command runner; they
are refused here with a message saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from ember.autoscaler.config import ConfigError, prepare_config

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 120.0
HEAD_STORE_BYTES = 256 * 2**20  # a laptop cluster's head: shared memory stays modest
LOCAL_PROVIDERS = ("fake_multinode",)


class LauncherError(RuntimeError):
    """What went wrong and what to do; the CLI prints it and exits non-zero."""


@dataclass(frozen=True)
class ClusterPaths:
    root: str

    @property
    def config(self) -> str:
        return os.path.join(self.root, "cluster.yaml")

    @property
    def head(self) -> str:
        return os.path.join(self.root, "head")

    @property
    def nodes(self) -> str:
        return os.path.join(self.root, "w")  # short: Unix socket paths live under it

    @property
    def state(self) -> str:
        return os.path.join(self.root, "launcher.json")


def paths_for(cluster_name: str) -> ClusterPaths:
    if not cluster_name or "/" in cluster_name or cluster_name in (".", ".."):
        raise LauncherError(f"cluster_name {cluster_name!r} must be a plain name (no '/')")
    base = os.environ.get("EMBER_UP_DIR") or os.path.join(tempfile.gettempdir(), "ember-up")
    return ClusterPaths(os.path.join(base, cluster_name))


# -- the config -----------------------------------------------------------------------------
def read_raw(config_path: str) -> dict[str, Any]:
    try:
        with open(config_path) as f:
            raw = yaml.safe_load(f)
    except OSError as e:
        raise LauncherError(f"cannot read {config_path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise LauncherError(f"{config_path} is not YAML: {e}") from None
    if not isinstance(raw, dict):
        raise LauncherError(f"{config_path}: a cluster config is a YAML mapping")
    return raw


def with_overrides(
    raw: Mapping[str, Any],
    *,
    min_workers: int | None = None,
    max_workers: int | None = None,
    cluster_name: str | None = None,
) -> dict[str, Any]:
    """The raw config with the command line's overrides (Ray's ``--min-workers``,
    ``--max-workers``, ``--cluster-name``). ``--min-workers`` sets the one worker type's
    ``min_workers``: with several worker types it would be ambiguous, and is refused."""
    out = json.loads(json.dumps(raw))  # a deep copy of plain data
    if cluster_name:
        out["cluster_name"] = cluster_name
    if max_workers is not None:
        out["max_workers"] = max_workers
    if min_workers is not None:
        head = out.get("head_node_type")
        workers = [t for t in out.get("available_node_types") or {} if t != head]
        if len(workers) != 1:
            raise LauncherError(
                f"--min-workers needs exactly one worker node type, this config has "
                f"{len(workers)} ({', '.join(workers) or 'none'}): set min_workers per type "
                "in the file instead"
            )
        out["available_node_types"][workers[0]]["min_workers"] = min_workers
    return out


def checked(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The prepared config, or LauncherError listing every problem (nothing started)."""
    try:
        config = prepare_config(json.loads(json.dumps(raw)), source)
    except ConfigError as e:
        raise LauncherError(str(e)) from None
    kind = config["provider"]["type"]
    if kind not in LOCAL_PROVIDERS:
        raise LauncherError(
            f"provider.type {kind!r}: ember up starts the head on this machine only "
            f"({', '.join(LOCAL_PROVIDERS)}) for now; start the head on its machine with "
            "`ember start --head --autoscaling-config CLUSTER.yaml`"
        )
    return config


def load(config_path: str, **overrides: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(raw with overrides, prepared) for ``config_path``."""
    raw = with_overrides(read_raw(config_path), **overrides)
    return raw, checked(raw, config_path)


# -- the head -------------------------------------------------------------------------------
def head_node(paths: ClusterPaths) -> dict[str, Any] | None:
    """The running head's node.json (address, session, dashboard), or None."""
    if not os.path.isdir(paths.head):
        return None
    from ember.cluster_address import live_local_nodes

    heads = [n for n in live_local_nodes(paths.head) if n.get("gcs_address")]
    return heads[0] if heads else None


def _ember(*args: str) -> list[str]:
    return [sys.executable, "-m", "ember.cli.main", *args]


def _head_start_argv(config: Mapping[str, Any], paths: ClusterPaths) -> list[str]:
    head_type = config["available_node_types"][config["head_node_type"]]
    res = {k: float(v) for k, v in (head_type.get("resources") or {}).items()}
    argv = _ember("start", "--head", "--port", "0", "--temp-dir", paths.head)
    argv += ["--node-ip-address", str(config["provider"].get("node_ip", "127.0.0.1"))]
    argv += ["--autoscaling-config", paths.config]
    if "CPU" in res:
        argv += ["--num-cpus", str(res.pop("CPU"))]
    if "GPU" in res:
        argv += ["--num-gpus", str(res.pop("GPU"))]
    store = int(res.pop("object_store_memory", HEAD_STORE_BYTES))
    argv += ["--object-store-memory", str(store)]
    if "memory" in res:
        argv += ["--memory", str(int(res.pop("memory")))]
    if res:
        argv += ["--resources", json.dumps(res)]
    if head_type.get("labels"):
        argv += ["--labels", json.dumps(head_type["labels"])]
    return argv


def _write_config(raw: Mapping[str, Any], paths: ClusterPaths) -> bool:
    """Writes the config the head's autoscaler reads (atomically); whether it changed."""
    raw = json.loads(json.dumps(raw))
    raw.setdefault("provider", {}).setdefault("temp_dir", paths.nodes)
    text = yaml.safe_dump(raw, sort_keys=True)
    try:
        with open(paths.config) as f:
            if f.read() == text:
                return False
    except OSError:
        pass
    tmp = paths.config + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, paths.config)
    return True


def up(
    config_path: str,
    *,
    min_workers: int | None = None,
    max_workers: int | None = None,
    cluster_name: str | None = None,
    no_restart: bool = False,
    restart_only: bool = False,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Starts the cluster, or brings a running one to the config (idempotent); the head's
    node.json. A running head is left running unless ``restart_only`` (then its Ember
    processes and its workers are stopped and started again); a changed config reaches the
    head's autoscaler, which re-reads its file, without a restart."""
    raw, config = load(
        config_path, min_workers=min_workers, max_workers=max_workers, cluster_name=cluster_name
    )
    paths = paths_for(config["cluster_name"])
    head = head_node(paths)
    if head is not None and restart_only:
        echo(f"Restarting cluster {config['cluster_name']} (--restart-only)")
        _stop_all(paths, echo)
        head = None
    os.makedirs(paths.root, mode=0o700, exist_ok=True)
    changed = _write_config(raw, paths)
    if head is not None:
        if changed:
            echo(f"Cluster {config['cluster_name']}: the new config reaches its autoscaler")
        else:
            echo(f"Cluster {config['cluster_name']} is up to date")
        if no_restart:
            echo("(--no-restart: the head's processes were left as they are)")
        return head
    argv = _head_start_argv(config, paths)
    echo(f"Starting the head of cluster {config['cluster_name']}")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _stop_all(paths, echo)
        raise LauncherError(f"the head did not start within {START_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        _stop_all(paths, echo)
        raise LauncherError(f"the head did not start:\n{(done.stderr or done.stdout)[-3000:]}")
    head = head_node(paths)
    if head is None:
        raise LauncherError(f"the head started but lists no node under {paths.head}")
    with open(paths.state, "w") as f:
        json.dump({"cluster_name": config["cluster_name"], "config": paths.config}, f)
    echo(f"Cluster {config['cluster_name']} is up: address {_address(head)}")
    if dashboard_url(head):
        echo(f"Dashboard: {dashboard_url(head)}")
    return head


def dashboard_url(head: Mapping[str, Any]) -> str:
    """The head's dashboard URL ("" when it runs none), from its node.json."""
    return str((head.get("dashboard") or {}).get("url") or "")


def _address(head: Mapping[str, Any]) -> str:
    return str(head["gcs_address"]).removeprefix("tcp:")


def _stop_all(paths: ClusterPaths, echo: Callable[[str], None]) -> None:
    """Stops the head (its raylet stops the autoscaler first), then every worker node the
    provider made under ``paths.nodes``; each ``ember stop`` also removes its nodes'
    shared-memory files."""
    for where in (paths.head, paths.nodes):
        if not os.path.isdir(where):
            continue
        try:
            done = subprocess.run(
                _ember("stop", "--temp-dir", where, "--grace-period", "10"),
                capture_output=True,
                text=True,
                timeout=STOP_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise LauncherError(f"ember stop --temp-dir {where} did not finish in time") from None
        if done.returncode != 0:
            raise LauncherError(f"ember stop --temp-dir {where} failed: {done.stderr[-2000:]}")
    # The provider's table of nodes: all of them are stopped now.
    table = os.path.join(paths.nodes, "fake_multinode_nodes.json")
    if os.path.exists(table):
        os.unlink(table)


def down(config_path: str, *, cluster_name: str | None = None, echo=print) -> bool:
    """Stops everything ``ember up`` started for this cluster and removes its directory;
    False when there was nothing (not an error: ``down`` is idempotent)."""
    raw = with_overrides(read_raw(config_path), cluster_name=cluster_name)
    name = raw.get("cluster_name") or "default"
    paths = paths_for(str(name))
    if not os.path.isdir(paths.root):
        echo(f"Cluster {name} is not running (nothing under {paths.root})")
        return False
    _stop_all(paths, echo)
    shutil.rmtree(paths.root, ignore_errors=True)
    echo(f"Cluster {name} is down")
    return True


def running_head(config_path: str, cluster_name: str | None = None) -> dict[str, Any]:
    """The head of the cluster this config names, or LauncherError saying to ``ember up``."""
    raw = with_overrides(read_raw(config_path), cluster_name=cluster_name)
    name = str(raw.get("cluster_name") or "default")
    head = head_node(paths_for(name))
    if head is None:
        raise LauncherError(
            f"cluster {name} is not running: start it with `ember up {config_path}`"
        )
    return head


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


def run_on_head(head: Mapping[str, Any], command: str | Sequence[str]) -> int:
    """Runs ``command`` (a shell line, as Ray's ``exec`` takes it) on the head with its
    output on this terminal; its exit status."""
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    return subprocess.call(argv, env=head_env(head), cwd=os.path.dirname(head["session_dir"]))


def worker_ips(config_path: str, cluster_name: str | None = None) -> list[str]:
    """The addresses of the worker nodes the cluster's provider runs now."""
    info = gcs_call(running_head(config_path, cluster_name), "cluster_info")
    return sorted(
        n.get("node_ip", "")
        for n in info.get("nodes") or ()
        if n.get("state") == "ALIVE" and not n.get("is_head")
    )


def gcs_call(head: Mapping[str, Any], op: str, body: Any = None) -> Any:
    """One call to the head's GCS, with the cluster token from its session."""
    from ember.autoscaler.monitor import GcsLink

    token = head_env(head).get("EMBER_TOKEN")
    link = GcsLink(str(head["gcs_address"]), token.encode() if token else None)
    try:
        return link.call(op, body)
    finally:
        link.close()


def read_status(head: Mapping[str, Any]) -> dict[str, Any]:
    """The autoscaler's last status record on the head ({} before its first tick)."""
    raw = gcs_call(head, "kv_get", {"namespace": "autoscaler", "key": b"status"})
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
