"""``ember get <resource> <id>``: one actor, task, node, worker, object, placement group or
job with every column, as Ray's ``ray get`` shows it (YAML by default), through
``ember.util.state``. A task that ran more than once shows each attempt; an object, each
reference to it. The id may be a unique prefix, or an actor's or placement group's name
(``lookup``); nothing matching exits 1."""

from __future__ import annotations

from typing import Any

import click
from ember.cli.errors import fail
from ember.cli.humanize import display
from ember.cli.lookup import resolve_id
from ember.cli.output import dump
from ember.cli.state_format import call, format_choice, grid, state_options
from ember.util import state
from ember.util.state.common import SCHEMAS

# The resource on the command line, and the library's function that gets one by id.
GETTERS: dict[str, Any] = {
    "actors": state.get_actor,
    "tasks": state.get_task,
    "nodes": state.get_node,
    "workers": state.get_worker,
    "objects": state.get_objects,
    "placement-groups": state.get_placement_group,
    "jobs": state.get_job,
}


@click.command("get")
@click.argument("resource", type=click.Choice(list(GETTERS)))
@click.argument("id", metavar="ID_PREFIX_OR_NAME")
@format_choice("yaml")
@state_options
def get_state(resource: str, id: str, fmt: str, timeout: int, address: str | None) -> None:
    """Show one RESOURCE with every column, as `ray get` does: the one whose id is, or
    starts with, ID_PREFIX_OR_NAME (any case), or the actor or placement group of that name."""
    found = call(lambda: GETTERS[resource](id, timeout=timeout), address)
    if not found:
        full = call(lambda: resolve_id(resource, id, timeout), address)
        found = call(lambda: GETTERS[resource](full, timeout=timeout), address)
    rows = [r.asdict() for r in (found if isinstance(found, list) else [found] if found else [])]
    if not rows:  # it went between the two queries
        fail(f"the {resource[:-1].replace('-', ' ')} {id!r} is no longer in the cluster")
    if fmt == "table":  # one row has too many columns to read across: a column a line
        columns = SCHEMAS[resource.replace("-", "_")].list_columns(detail=True)
        click.echo(
            "\n\n".join(
                grid(
                    [{"column": c, "value": display(c, r.get(c))} for c in columns],
                    ["column", "value"],
                    False,
                )
                for r in rows
            )
        )
    else:
        click.echo(dump(rows, fmt))
    if resource == "actors" and fmt != "json":
        _say_why_pending(rows, address)


def _say_why_pending(rows: list[dict[str, Any]], address: str | None) -> None:
    """Ray's actor row has no field for why an actor waits; Ember's GCS knows: printed
    after the row, as a YAML comment (the output still parses)."""
    from ember.cli.api_client import resolve

    waiting = [r for r in rows if r.get("state") in ("PENDING_CREATION", "RESTARTING")]
    if not waiting:
        return
    api = resolve(address)
    for r in waiting:
        reason = api.get(f"/api/actors/{r['actor_id']}").get("pending_reason")
        what = reason or "waiting to be scheduled (no reason reported yet)"
        click.echo(f"# actor {r['actor_id']} is pending: {what}")
