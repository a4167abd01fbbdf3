"""``ember kill-actor ID|NAME``: ends an actor through the dashboard (the GCS kills it)."""

from __future__ import annotations

import click
from ember.cli.api_client import address_option, resolve


@click.command("kill-actor")
@click.argument("actor")
@click.option("--allow-restart", is_flag=True, help="Let an actor with max_restarts restart.")
@address_option
def kill_actor(actor: str, allow_restart: bool, address: str | None) -> None:
    """Kill an actor given its id (or a unique prefix of 6+ characters) or its name."""
    api = resolve(address)
    reply = api.post(f"/api/actors/{actor}/kill", {"no_restart": not allow_restart})
    if reply.get("ok") is False:
        # Already dead: say so plainly; nothing failed.
        click.echo(reply.get("message") or f"actor {actor} was not killed")
        return
    click.echo(f"killed actor {reply.get('actor_id', actor)}")
