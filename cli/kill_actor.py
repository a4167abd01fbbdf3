"""``ember kill-actor ID|NAME``: ends an actor through the dashboard (the GCS kills it)."""

from __future__ import annotations

import click
from ember.cli.api_client import cluster_options, resolve


@click.command("kill-actor")
@click.argument("actor")
@click.option("--allow-restart", is_flag=True, help="Let an actor with max_restarts restart.")
@cluster_options
def kill_actor(actor: str, allow_restart: bool, address: str | None) -> None:
    """Kill an actor given its id (or a unique prefix of 6+ characters) or its name."""
    api = resolve(address)
    named, _ = api.list_all("/api/actors", [f"name={actor}"])
    if named and all(a.get("state") == "DEAD" for a in named):
        # The name's actors are all dead (the API resolves only live names): say so plainly.
        a = named[-1]
        cause = f": {a['death_cause']}" if a.get("death_cause") else ""
        click.echo(f"actor {a['actor_id']} ({actor}) is already dead{cause}")
        return
    target = next((a["actor_id"] for a in named if a.get("state") != "DEAD"), actor)
    # The reason becomes the actor's death cause: say it was this command, not the web page.
    params = {"no_restart": not allow_restart, "reason": "killed with `ember kill-actor`"}
    reply = api.post(f"/api/actors/{target}/kill", params)
    if reply.get("ok") is False:
        click.echo(reply.get("message") or f"actor {actor} was not killed")
        return
    click.echo(f"killed actor {reply.get('actor_id', actor)}")
