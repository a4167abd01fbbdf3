"""``ember summary tasks|actors|objects``: the cluster's tasks by function, actors by class
or object references by call site, with counts by state, as Ray's ``ray summary``, through
``ember.util.state``."""

from __future__ import annotations

from typing import Any

import click
from ember.cli.output import dump
from ember.cli.state_format import RULE, banner, call, format_choice, grid, state_options
from ember.util import state

# Task and actor states in the order a reader looks for them: done, failed, under way, waiting.
STATE_ORDER = (
    "FINISHED",
    "FAILED",
    "RUNNING",
    "ALIVE",
    "SUBMITTED_TO_WORKER",
    "PENDING_NODE_ASSIGNMENT",
    "PENDING_ARGS_AVAIL",
    "PENDING_CREATION",
    "RESTARTING",
    "DEAD",
)
# kind: (the library's summary, the group's name column, the group's counts by state)
KINDS: dict[str, tuple[Any, str, str]] = {
    "tasks": (state.summarize_tasks, "func_or_class_name", "state_counts"),
    "actors": (state.summarize_actors, "class_name", "state_counts"),
    "objects": (state.summarize_objects, "call_site", "ref_type_counts"),
}


@click.command("summary")
@click.argument("kind", type=click.Choice(list(KINDS)))
@format_choice("table")
@state_options
def summary(kind: str, fmt: str, timeout: int, address: str | None) -> None:
    """Summarise tasks by function, actors by class or objects by call site, with counts by
    state, as `ray summary` does."""
    summarize, name_column, counts_key = KINDS[kind]
    data = call(lambda: summarize(timeout=timeout, raise_on_missing_output=False), address)
    if fmt != "table":
        click.echo(dump(data, fmt))
        return
    cluster = dict(data.get("cluster") or {})
    groups = cluster.pop("summary", {}) or {}
    by = cluster.pop("summary_by", "")
    rows = []
    for key, g in groups.items():
        counts = g.get(counts_key) or {}
        row = {k: v for k, v in g.items() if not isinstance(v, dict)}
        row[name_column] = g.get(name_column, key)
        if kind != "objects":  # an object group has its total_objects already
            row["total"] = sum(counts.values())
        rows.append({**row, **counts})
    rows.sort(key=lambda r: (-r.get("total", r.get("total_objects", 0)), str(r[name_column])))
    seen = {s for g in groups.values() for s in g.get(counts_key) or {}}
    states = [s for s in STATE_ORDER if s in seen] + sorted(seen - set(STATE_ORDER))
    fixed = [name_column, *(c for c in (rows[0] if rows else {}) if c not in seen)]
    columns = list(dict.fromkeys([*fixed, *(["total"] if kind != "objects" else []), *states]))
    stats = "\n".join(f"{k}: {v}" for k, v in cluster.items())
    table = grid(rows, columns) if rows else f"(no {kind} yet)"
    click.echo(
        f"{banner(f'{kind.capitalize()} Summary')}\nStats:\n{RULE}\n{stats}\n\n"
        f"Table (group by {by}):\n{RULE}\n{table}"
    )
