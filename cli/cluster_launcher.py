"""``ember up``, ``down``, ``exec``, ``submit``, ``attach``, ``rsync-up``, ``rsync-down``,
``get-head-ip``, ``get-worker-ips`` and ``monitor``: Ray's cluster launcher commands, on a
cluster.yaml (``ember.autoscaler.launcher`` does the work; ``ember dashboard CLUSTER.yaml``
is in ``dashboard_url``)."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
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


def _head(cluster_config: str, cluster_name: str | None):
    """The running head (``heads.LocalHead`` or ``remote_head.RemoteHead``), or the error."""
    from ember.autoscaler.heads import running_head

    launcher = _launcher()
    try:
        return running_head(cluster_config, cluster_name)
    except launcher.LauncherError as e:
        fail(str(e))


def _on_head(action) -> int:
    """``action()``'s exit status, with a remote head's SSH failures as a clear error."""
    from ember.autoscaler.remote_head import RemoteError

    launcher = _launcher()
    try:
        return action()
    except (RemoteError, launcher.LauncherError) as e:
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
    if restart_only and not yes:
        click.confirm("Restart the cluster's head and workers?", abort=True)
    _up(cluster_config, cluster_name, min_workers, max_workers, no_restart, restart_only)


def _up(
    cluster_config: str,
    cluster_name: str | None,
    min_workers: int | None = None,
    max_workers: int | None = None,
    no_restart: bool = False,
    restart_only: bool = False,
) -> None:
    launcher = _launcher()
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
    if not yes:
        click.confirm("Stop the cluster's head and every worker?", abort=True)
    _down(cluster_config, cluster_name)


def _down(cluster_config: str, cluster_name: str | None) -> None:
    launcher = _launcher()
    try:
        launcher.down(cluster_config, cluster_name=cluster_name, echo=click.echo)
    except launcher.LauncherError as e:
        fail(str(e))


def _tmux_line(cmd: str, cluster: str) -> str:
    """Ray's ``exec --tmux``: the command in a detached tmux session that stays open after it
    (``ember attach --tmux`` shows it), on a tmux server of the cluster's own (``-L``), which
    ``ember down`` ends with the head's processes (``command_runner.tmux_socket``)."""
    from ember.autoscaler.heads import tmux_socket

    sock = shlex.quote(tmux_socket(cluster))
    return (
        "command -v tmux >/dev/null 2>&1 || { echo 'ember exec --tmux: tmux is not installed "
        "on the head' >&2; exit 127; }; "
        f"tmux -L {sock} new-session -d {shlex.quote(cmd + '; exec sh')}"
    )


@click.command("exec")
@_CONFIG
@click.argument("cmd")
@click.option("--start", is_flag=True, help="Start the cluster first if it is not running.")
@click.option("--stop", is_flag=True, help="Take the cluster down after the command.")
@click.option("--tmux", is_flag=True, help="Run CMD in a detached tmux session on the head.")
@click.option(
    "--port-forward",
    "-p",
    type=click.IntRange(1, 65535),
    multiple=True,
    help="Forward this port of this machine to the same port on the head (repeatable).",
)
@_NAME
def exec_(
    cluster_config: str,
    cmd: str,
    start: bool,
    stop: bool,
    tmux: bool,
    port_forward: tuple[int, ...],
    cluster_name: str | None,
) -> None:
    """Run CMD (a shell line) on the cluster's head, where ember.init() joins the cluster."""
    if start:
        _up(cluster_config, cluster_name)
    head = _head(cluster_config, cluster_name)
    line = _tmux_line(cmd, head.cluster_name) if tmux else cmd
    # SIGTERM unwinds like Ctrl-C: the ssh child is killed and the forwards are closed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with contextlib.ExitStack() as forwards:
        for port in port_forward:
            forwards.enter_context(_on_head(lambda p=port: head.forward(p)))
        status = _on_head(lambda: head.run(line))
    if stop:
        _down(cluster_config, cluster_name)
    sys.exit(status)


@click.command()
@_CONFIG
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@_NAME
def submit(cluster_config: str, script: str, script_args: tuple, cluster_name: str | None) -> None:
    """Copy SCRIPT to the head and run it there with python (ARGS after it)."""
    head = _head(cluster_config, cluster_name)
    target = f"{head.workdir}/{os.path.basename(script)}"
    _on_head(lambda: head.put(script, target))
    sys.exit(_on_head(lambda: head.run([head.python, target, *script_args])))


@click.command()
@_CONFIG
@click.option("--tmux", is_flag=True, help="Attach to the head's tmux session (ember exec --tmux).")
@_NAME
def attach(cluster_config: str, tmux: bool, cluster_name: str | None) -> None:
    """Open a shell on the cluster's head."""
    head = _head(cluster_config, cluster_name)
    if tmux:
        from ember.autoscaler.heads import tmux_socket

        sock = shlex.quote(tmux_socket(head.cluster_name))
        sys.exit(
            _on_head(lambda: head.run(f"tmux -L {sock} attach || tmux -L {sock} new", tty=True))
        )
    sys.exit(_on_head(head.shell))


@click.command("rsync-up")
@_CONFIG
@click.argument("source")
@click.argument("target")
@_NAME
def rsync_up(cluster_config: str, source: str, target: str, cluster_name: str | None) -> None:
    """Copy SOURCE on this machine to TARGET on the head."""
    head = _head(cluster_config, cluster_name)
    if not os.path.exists(source):
        fail(f"{source}: no such file or directory")
    _on_head(lambda: head.put(source, target))


@click.command("rsync-down")
@_CONFIG
@click.argument("source")
@click.argument("target")
@_NAME
def rsync_down(cluster_config: str, source: str, target: str, cluster_name: str | None) -> None:
    """Copy SOURCE on the head to TARGET on this machine."""
    head = _head(cluster_config, cluster_name)
    _on_head(lambda: head.get(source, target))


@click.command("get-head-ip")
@_CONFIG
@_NAME
def get_head_ip(cluster_config: str, cluster_name: str | None) -> None:
    """Print the head's IP address."""
    click.echo(_head(cluster_config, cluster_name).ip)


@click.command("get-worker-ips")
@_CONFIG
@_NAME
def get_worker_ips(cluster_config: str, cluster_name: str | None) -> None:
    """Print the worker nodes' IP addresses, one a line."""
    from ember.autoscaler.heads import worker_ips

    for ip in _on_head(lambda: worker_ips(cluster_config, cluster_name)):
        click.echo(ip)


@click.command()
@_CONFIG
@click.option("--lines", type=click.IntRange(min=0), default=100, show_default=True)
@click.option("--follow/--no-follow", default=True, help="Keep printing what is added.")
@_NAME
def monitor(cluster_config: str, lines: int, follow: bool, cluster_name: str | None) -> None:
    """Print the autoscaler's log (following it until Ctrl-C)."""
    head = _head(cluster_config, cluster_name)
    sys.exit(_on_head(lambda: head.tail_monitor(lines, follow)))
