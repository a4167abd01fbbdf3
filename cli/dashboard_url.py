"""``ember dashboard``: the dashboard's URL (checked: it answers)."""

from __future__ import annotations

import sys

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
    if cluster_config is not None:
        from ember.autoscaler.launcher import LauncherError, dashboard_url, running_head
        from ember.cli.errors import fail

        try:
            address = dashboard_url(running_head(cluster_config))
        except LauncherError as e:
            fail(str(e))
        if not address:  # the head is on this machine: its URL needs no forward
            fail(f"the head of {cluster_config} runs no dashboard")
    if history_path is not None:
        _serve_history(history_path, host, port)
        return
    api = resolve(address)
    version = api.get("/api/version", timeout=10)
    if fmt != "table":
        click.echo(dump({**version, "url": api.url}, fmt))
        return
    click.echo(api.url)
    if version.get("session_dir"):
        click.echo(
            f"(session {version['session_dir']}, up {version.get('uptime_s', 0):.0f} s)", err=True
        )


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
