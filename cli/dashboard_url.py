"""``ember dashboard``: the dashboard's URL (checked: it answers)."""

from __future__ import annotations

import click
from ember.cli.api_client import cluster_options, resolve


@click.command("dashboard")
@cluster_options
def dashboard(address: str | None) -> None:
    """Print the URL of the cluster's dashboard."""
    api = resolve(address)
    version = api.get("/api/version", timeout=10)
    click.echo(api.url)
    if version.get("session_dir"):
        click.echo(
            f"(session {version['session_dir']}, up {version.get('uptime_s', 0):.0f} s)", err=True
        )
