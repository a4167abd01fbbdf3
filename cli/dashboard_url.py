"""``ember dashboard``: the dashboard's URL (checked: it answers)."""

from __future__ import annotations

import signal
import sys
import time

import click
from ember.cli.api_client import cluster_options, resolve
from ember.cli.output import dump, format_option


@click.command("dashboard")
@click.argument("cluster_config", metavar="[CLUSTER.yaml]", required=False)
@cluster_options
@click.option(
    "--history",
    "history_path",
    default=None,
    metavar="PATH",
    help="Serve the dashboard read-only from stopped sessions' history instead: PATH is a "
    "session directory, an archive made by `ember archive`, or a directory holding "
    "session_* directories and/or archives.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="With --history: the address to listen on (off loopback a token is required).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8265,
    show_default=True,
    help="With --history: the port (or the next free one; 0: any).",
)
@format_option
def dashboard(
    cluster_config: str | None,
    address: str | None,
    history_path: str | None,
    host: str,
    port: int,
    fmt: str,
) -> None:
    """Print the URL of the cluster's dashboard (of the cluster `ember up CLUSTER.yaml`
    started, when given), or with --history serve a stopped session's dashboard (until
    Ctrl-C)."""
    forward = None
    if cluster_config is not None:
        from ember.autoscaler.heads import running_head
        from ember.autoscaler.launcher import LauncherError
        from ember.autoscaler.remote_head import RemoteError
        from ember.cli.errors import fail

        # SIGTERM unwinds like Ctrl-C, through the ``finally`` that ends the SSH forward.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            # A remote head's dashboard (on its loopback) comes through an SSH forward,
            # held until Ctrl-C as Ray's `ray dashboard` holds it.
            address, forward = running_head(cluster_config).open_dashboard()
        except (LauncherError, RemoteError) as e:
            fail(str(e))
        if not address:
            fail(f"the head of {cluster_config} runs no dashboard")
    if history_path is not None:
        _serve_history(history_path, host, port)
        return
    try:
        _show(address, fmt, forward)
    finally:
        if forward is not None:
            forward.close()


def _show(address: str | None, fmt: str, forward) -> None:
    """The dashboard's URL and version; with an SSH ``forward``, held until Ctrl-C."""
    api = resolve(address)
    version = api.get("/api/version", timeout=10)
    if fmt != "table":
        click.echo(dump({**version, "url": api.url}, fmt))
    else:
        click.echo(api.url)
        if version.get("session_dir"):
            click.echo(
                f"(session {version['session_dir']}, up {version.get('uptime_s', 0):.0f} s)",
                err=True,
            )
    if forward is not None:
        click.echo("Forwarding the head's dashboard over SSH; Ctrl-C to stop.", err=True)
        sys.stdout.flush()
        try:
            while forward.alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass


def _serve_history(path: str, host: str, port: int) -> None:
    from ember.cli.api_client import cluster_settings
    from ember.dashboard.history_archive import ArchiveError
    from ember.dashboard.history_reader import NoHistory
    from ember.dashboard.history_server import serve

    token, _ = cluster_settings()

    def announce(line: str) -> None:
        click.echo(line)
        sys.stdout.flush()

    try:
        serve(path, host, port, token, announce)
    except (NoHistory, ArchiveError, ValueError, OSError) as e:
        raise click.ClickException(str(e)) from None
