"""The cluster launcher behind ``ember up``/``down``/``exec``/``submit``/``attach``/
``rsync-up``/``rsync-down``/``get-head-ip``/``get-worker-ips``/``monitor``/``dashboard``
(Ray's ``ray up`` family), for a cluster.yaml.

What ``ember up`` started is recorded in a directory of the cluster's own,
``$TMPDIR/ember-up/<cluster_name>/``: ``cluster.yaml`` (the config the head's autoscaler
reads, re-read by it when it changes), ``head/`` (the head's ``--temp-dir``), ``w/`` (the
worker nodes' directories) and ``launcher.json`` (the head's address). ``ember down`` stops
exactly the processes under that directory, removes its shared-memory files with them and
then the directory: nothing another cluster runs is touched.

Providers:
- ``fake_multinode``: the head and its workers are processes on this machine.
- ``slurm``: the head (with its autoscaler) runs here, where ``ember up`` is typed (a login
  node: Slurm's client commands must work here); workers are ``sbatch`` jobs.
  ``provider.gcs_address`` is the head's HOST:PORT as the compute nodes reach it: the head
  listens there. ``ember down`` stops the head, then ``scancel``s every job of the cluster.
- ``local``: the head on ``provider.head_ip``, over SSH (``remote_head.py``); ``launcher.json``
  then records the head's host, GCS address and directory there, and the cluster token lives
  in ``token`` (mode 0600) beside it.
Others (``external``, ``kubernetes``) are refused with what to do instead.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from ember.autoscaler.command_runner import tmux_socket
from ember.autoscaler.config import ConfigError, prepare_config

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 120.0
HEAD_STORE_BYTES = 256 * 2**20  # a laptop cluster's head: shared memory stays modest
UP_PROVIDERS = ("fake_multinode", "slurm", "local")
SLURM_DOWN_TIMEOUT_S = 90.0  # scancel'ed jobs leave squeue (Slurm's KillWait, then done)


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

    @property
    def token(self) -> str:
        return os.path.join(self.root, "token")

    @property
    def head_copy(self) -> str:
        """The config as the remote head's autoscaler reads it, before it is copied there."""
        return os.path.join(self.root, "head-cluster.yaml")


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
    if kind not in UP_PROVIDERS:
        raise LauncherError(
            f"provider.type {kind!r}: ember up starts clusters for {', '.join(UP_PROVIDERS)}; "
            "start this one's head on its machine with "
            "`ember start --head --autoscaling-config CLUSTER.yaml` (docs/deploying.md)"
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
    """The head on this machine: fake_multinode's on loopback and any port; slurm's where
    ``provider.gcs_address`` says, since the jobs' nodes join it there."""
    from ember.autoscaler.providers.start_args import resource_args

    provider = config["provider"]
    head_type = config["available_node_types"][config["head_node_type"]]
    res = {k: float(v) for k, v in (head_type.get("resources") or {}).items()}
    if provider["type"] == "slurm":
        host, _, port = str(provider["gcs_address"]).rpartition(":")
        ip = socket.gethostbyname(host)  # a login node's name: its address, to listen on
    else:
        port, ip = "0", str(provider.get("node_ip", "127.0.0.1"))
        res.setdefault("object_store_memory", HEAD_STORE_BYTES)
    argv = _ember("start", "--head", "--port", port, "--temp-dir", paths.head)
    argv += ["--node-ip-address", ip, "--autoscaling-config", paths.config]
    return argv + resource_args(res, head_type.get("labels") or {})


def _write_config(raw: Mapping[str, Any], paths: ClusterPaths) -> bool:
    """Writes the config the head's autoscaler reads (atomically); whether it changed. For
    a remote head this is the local copy ``ember down`` reads back."""
    raw = json.loads(json.dumps(raw))
    if raw.get("provider", {}).get("type") == "fake_multinode":
        raw["provider"].setdefault("temp_dir", paths.nodes)
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
    node.json (a remote head's record). A running head is left running unless
    ``restart_only`` (then its Ember processes and its workers are stopped and started
    again); a changed config reaches the head's autoscaler, which re-reads its file,
    without a restart."""
    raw, config = load(
        config_path, min_workers=min_workers, max_workers=max_workers, cluster_name=cluster_name
    )
    paths = paths_for(config["cluster_name"])
    if config["provider"]["type"] == "local":
        return _up_remote(raw, config, paths, restart_only, no_restart, echo)
    head = head_node(paths)
    if head is not None and restart_only:
        echo(f"Restarting cluster {config['cluster_name']} (--restart-only)")
        _stop_all(paths, echo)
        head = None
    os.makedirs(paths.root, mode=0o700, exist_ok=True)
    changed = _write_config(raw, paths)
    if head is not None:
        _say_running(config["cluster_name"], changed, no_restart, echo)
        return head
    argv = _head_start_argv(config, paths)
    echo(f"Starting the head of cluster {config['cluster_name']}")
    # The token by environment: the head's autoscaler inherits it, and so has it from its
    # first tick (looking it up in the head's session races the session being written).
    env = {**os.environ, "EMBER_TOKEN": _cluster_token(paths)}
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=START_TIMEOUT_S, env=env
        )
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


def _say_running(name: str, changed: bool, no_restart: bool, echo: Callable[[str], None]) -> None:
    if changed:
        echo(f"Cluster {name}: the new config reaches its autoscaler")
    else:
        echo(f"Cluster {name} is up to date")
    if no_restart:
        echo("(--no-restart: the head's processes were left as they are)")


def read_record(paths: ClusterPaths) -> dict[str, Any] | None:
    try:
        with open(paths.state) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _cluster_token(paths: ClusterPaths) -> str:
    """The cluster token of the head ``ember up`` starts, made once and kept in the
    cluster's directory (0600): the head and its autoscaler get it by environment, and the
    commands after ``up`` reach a remote head's GCS with it."""
    from ember.cluster_token import new_token

    try:
        with open(paths.token) as f:
            return f.read().strip()
    except FileNotFoundError:
        pass
    token = new_token().decode()
    fd = os.open(paths.token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    return token


def _up_remote(
    raw: Mapping[str, Any],
    config: Mapping[str, Any],
    paths: ClusterPaths,
    restart_only: bool,
    no_restart: bool,
    echo: Callable[[str], None],
) -> dict[str, Any]:
    from ember.autoscaler import remote_head as rh

    name = config["cluster_name"]
    os.makedirs(paths.root, mode=0o700, exist_ok=True)
    record = read_record(paths)
    try:
        alive = record is not None and rh.head_alive(config)
        if alive and restart_only:
            echo(f"Restarting cluster {name} (--restart-only)")
            _raise_left(rh.stop_cluster(config, echo), paths)
            alive = False
        changed = _write_config(raw, paths)
        if alive:
            assert record is not None
            if changed:  # the autoscaler re-reads its file when it changes, so only then
                rh.push_config(config, raw, paths.head_copy)
            rh.sync_file_mounts(config, rh.head_runner(config), record["home"], echo)
            _say_running(name, changed, no_restart, echo)
            return record
        echo(f"Starting the head of cluster {name} on {config['provider']['head_ip']}")
        try:
            record = rh.start_head(config, raw, paths.head_copy, _cluster_token(paths), echo)
        except rh.RemoteError:
            rh.stop_cluster(config, lambda _: None)  # what half-started; best effort
            raise
    except rh.RemoteError as e:
        raise LauncherError(str(e)) from None
    with open(paths.state, "w") as f:
        json.dump({"cluster_name": name, "config": paths.config, **record}, f)
    echo(f"Cluster {name} is up: address {record['gcs_address']}")
    echo("Dashboard: `ember dashboard CLUSTER.yaml` forwards it here over SSH")
    return record


def _raise_left(errors: list[str], paths: ClusterPaths) -> None:
    if errors:
        raise LauncherError(
            "not everything of the cluster could be stopped (run `ember down` again once "
            f"the hosts answer; if they are gone for good, remove {paths.root}):\n  "
            + "\n  ".join(errors)
        )


def dashboard_url(head: Mapping[str, Any]) -> str:
    """The head's dashboard URL ("" when it runs none), from its node.json."""
    return str((head.get("dashboard") or {}).get("url") or "")


def _address(head: Mapping[str, Any]) -> str:
    return str(head["gcs_address"]).removeprefix("tcp:")


def _stop_all(paths: ClusterPaths, echo: Callable[[str], None]) -> None:
    """Stops the head (its raylet stops the autoscaler first), then every worker node the
    provider made: fake_multinode's under ``paths.nodes`` (each ``ember stop`` also removes
    its nodes' shared-memory files), slurm's jobs by ``scancel``."""
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
    if shutil.which("tmux") and os.path.exists(paths.state):  # exec --tmux's sessions
        name = os.path.basename(paths.root)
        subprocess.run(
            ["tmux", "-L", tmux_socket(name), "kill-server"],
            capture_output=True,
            timeout=STOP_TIMEOUT_S,
        )
    # The provider's table of nodes: all of them are stopped now.
    table = os.path.join(paths.nodes, "fake_multinode_nodes.json")
    if os.path.exists(table):
        os.unlink(table)
    if os.path.exists(paths.config):
        config = checked(read_raw(paths.config), paths.config)
        if config["provider"]["type"] == "slurm":
            _cancel_slurm_jobs(config, echo)


def _cancel_slurm_jobs(config: Mapping[str, Any], echo: Callable[[str], None]) -> None:
    """``scancel`` every job of the cluster, then wait until Slurm lists none of them (a
    cancelled job's node stops in its KillWait)."""
    from ember.autoscaler.providers.slurm import SlurmNodeProvider

    try:
        provider = SlurmNodeProvider(config["provider"], config["cluster_name"])
        jobs = provider.listed_jobs()
        for job in jobs:
            provider.terminate_node(job)
        echo(f"Cancelled {len(jobs)} Slurm job(s) of cluster {config['cluster_name']}")
        deadline = time.monotonic() + SLURM_DOWN_TIMEOUT_S
        while provider.listed_jobs():
            if time.monotonic() > deadline:
                raise LauncherError(
                    f"Slurm still lists jobs {', '.join(provider.listed_jobs())} of the "
                    f"cluster {SLURM_DOWN_TIMEOUT_S:.0f} s after scancel"
                )
            time.sleep(0.5)
    except (RuntimeError, ValueError) as e:
        if isinstance(e, LauncherError):
            raise
        raise LauncherError(str(e)) from None


def down(config_path: str, *, cluster_name: str | None = None, echo=print) -> bool:
    """Stops everything ``ember up`` started for this cluster and removes its directory;
    False when there was nothing (not an error: ``down`` is idempotent)."""
    raw = with_overrides(read_raw(config_path), cluster_name=cluster_name)
    name = raw.get("cluster_name") or "default"
    paths = paths_for(str(name))
    if not os.path.isdir(paths.root):
        echo(f"Cluster {name} is not running (nothing under {paths.root})")
        return False
    if (raw.get("provider") or {}).get("type") == "local":
        from ember.autoscaler import remote_head as rh

        try:
            _raise_left(rh.stop_cluster(checked(raw, config_path), echo), paths)
        except rh.RemoteError as e:
            raise LauncherError(str(e)) from None
    else:
        _stop_all(paths, echo)
    shutil.rmtree(paths.root, ignore_errors=True)
    echo(f"Cluster {name} is down")
    return True
