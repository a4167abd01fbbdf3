"""``ember up``, ``down``, ``exec``, ``submit``, ``attach``, ``rsync-up``, ``rsync-down``,
``get-head-ip``, ``get-worker-ips`` and ``monitor``: Ray's cluster launcher commands, on a
cluster.yaml (``ember.autoscaler.launcher`` does the work; ``ember dashboard CLUSTER.yaml``
is in ``dashboard_url``)."""

from __future__ import annotations

import os
import shutil
import sys

import click
from ember.cli.errors import fail

_CONFIG = click.argument("cluster_config", metavar="CLUSTER.yaml", type=click.Path(dir_okay=False))
_NAME = click.option(
    "--cluster-name", "-n", default=None, help="Override the config's cluster_name."
)


def _launcher():
    from ember.autoscaler import launcher

    return launcher


def _head(cluster_config: str, cluster_name: str | None) -> dict:
    launcher = _launcher()
    try:
        return launcher.running_head(cluster_config, cluster_name)
    except launcher.LauncherError as e:
        fail(str(e))


@click.command()
@_CONFIG
@click.option(
    "--min-workers",
    type=click.IntRange(min=0),
    default=None,
    help="Override the (one) worker type's min_workers.",
)
@click.option(
    "--max-workers",
    type=click.IntRange(min=0),
    default=None,
    help="Override the config's max_workers.",
)
@click.option("--no-restart", is_flag=True, help="Never restart the head's processes.")
@click.option(
    "--restart-only",
    is_flag=True,
    help="Stop and start the head's processes (and its workers) again.",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@_NAME
def up(
    cluster_config: str,
    min_workers: int | None,
    max_workers: int | None,
    no_restart: bool,
    restart_only: bool,
    yes: bool,
    cluster_name: str | None,
) -> None:
    """Start a cluster from CLUSTER.yaml, or apply a changed config to the running one."""
    if no_restart and restart_only:
        raise click.UsageError("--no-restart and --restart-only contradict each other")
    launcher = _launcher()
    if restart_only and not yes:
        click.confirm("Restart the cluster's head and workers?", abort=True)
    try:
        launcher.up(
            cluster_config,
            min_workers=min_workers,
            max_workers=max_workers,
            cluster_name=cluster_name,
            no_restart=no_restart,
            restart_only=restart_only,
            echo=click.echo,
        )
    except launcher.LauncherError as e:
        fail(str(e))


@click.command()
@_CONFIG
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@_NAME
def down(cluster_config: str, yes: bool, cluster_name: str | None) -> None:
    """Stop every node of the cluster ember up started (idempotent)."""
    launcher = _launcher()
    if not yes:
        click.confirm("Stop the cluster's head and every worker?", abort=True)
    try:
        launcher.down(cluster_config, cluster_name=cluster_name, echo=click.echo)
    except launcher.LauncherError as e:
        fail(str(e))


@click.command("exec")
@_CONFIG
@click.argument("cmd")
@_NAME
def exec_(cluster_config: str, cmd: str, cluster_name: str | None) -> None:
    """Run CMD (a shell line) on the cluster's head, where ember.init() joins the cluster."""
    sys.exit(_launcher().run_on_head(_head(cluster_config, cluster_name), cmd))


@click.command()
@_CONFIG
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@_NAME
def submit(cluster_config: str, script: str, script_args: tuple, cluster_name: str | None) -> None:
    """Copy SCRIPT to the head and run it there with python (ARGS after it)."""
    head = _head(cluster_config, cluster_name)
    target = os.path.join(os.path.dirname(head["session_dir"]), os.path.basename(script))
    shutil.copyfile(script, target)
    sys.exit(_launcher().run_on_head(head, [sys.executable, target, *script_args]))


@click.command()
@_CONFIG
@_NAME
def attach(cluster_config: str, cluster_name: str | None) -> None:
    """Open a shell on the cluster's head."""
    shell = os.environ.get("SHELL") or "/bin/sh"
    sys.exit(_launcher().run_on_head(_head(cluster_config, cluster_name), [shell]))


def _copy(cluster_config: str, source: str, target: str, cluster_name: str | None) -> None:
    _head(cluster_config, cluster_name)  # the head runs on this machine: a local copy
    if not os.path.exists(source):
        fail(f"{source}: no such file or directory")
    if os.path.isdir(source):
        shutil.copytree(source, target, dirs_exist_ok=True, symlinks=True)
    else:
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        shutil.copy2(source, target)


@click.command("rsync-up")
@_CONFIG
@click.argument("source")
@click.argument("target")
@_NAME
def rsync_up(cluster_config: str, source: str, target: str, cluster_name: str | None) -> None:
    """Copy SOURCE on this machine to TARGET on the head."""
    _copy(cluster_config, source, target, cluster_name)


@click.command("rsync-down")
@_CONFIG
@click.argument("source")
@click.argument("target")
@_NAME
def rsync_down(cluster_config: str, source: str, target: str, cluster_name: str | None) -> None:
    """Copy SOURCE on the head to TARGET on this machine."""
    _copy(cluster_config, source, target, cluster_name)


@click.command("get-head-ip")
@_CONFIG
@_NAME
def get_head_ip(cluster_config: str, cluster_name: str | None) -> None:
    """Print the head's IP address."""
    click.echo(_head(cluster_config, cluster_name)["node_ip"])


@click.command("get-worker-ips")
@_CONFIG
@_NAME
def get_worker_ips(cluster_config: str, cluster_name: str | None) -> None:
    """Print the worker nodes' IP addresses, one a line."""
    launcher = _launcher()
    try:
        for ip in launcher.worker_ips(cluster_config, cluster_name):
            click.echo(ip)
    except launcher.LauncherError as e:
        fail(str(e))


@click.command()
@_CONFIG
@click.option("--lines", type=click.IntRange(min=0), default=100, show_default=True)
@click.option("--follow/--no-follow", default=True, help="Keep printing what is added.")
@_NAME
def monitor(cluster_config: str, lines: int, follow: bool, cluster_name: str | None) -> None:
    """Print the autoscaler's log (following it until Ctrl-C)."""
    launcher = _launcher()
    path = launcher.monitor_log(_head(cluster_config, cluster_name))
    if not os.path.exists(path):
        fail(f"{path}: the autoscaler has written no log yet")
    try:
        launcher.tail(path, lines, follow, click.echo)
    except KeyboardInterrupt:
        pass
