"""``ember list nodes|workers|actors|tasks|objects``: a page of the cluster's state from the
dashboard, filtered on the server before the limit (``--filter KEY=VALUE``, repeatable)."""

from __future__ import annotations

import click
from ember.cli.api_client import address_option, emit, format_option, resolve, table

# The endpoint and the columns a table shows (JSON has every field).
KINDS = {
    "nodes": (
        "/api/nodes",
        ["node_id", "node_ip", "state", "is_head", "cpu_percent", "mem_used_bytes", "num_workers"],
    ),
    "workers": (
        "/api/workers",
        [
            "node_id",
            "pid",
            "kind",
            "state",
            "current_task",
            "actor_class",
            "cpu_percent",
            "rss_bytes",
        ],
    ),
    "actors": (
        "/api/actors",
        [
            "actor_id",
            "class_name",
            "name",
            "state",
            "node_id",
            "pid",
            "num_restarts",
            "pending_calls",
            "executed_calls",
        ],
    ),
    "tasks": (
        "/api/tasks",
        ["task_id", "name", "state", "type", "node_id", "pid", "attempt", "duration_s"],
    ),
    "objects": (
        "/api/objects",
        ["object_id", "reference_type", "object_size", "status", "ip", "pid", "call_site"],
    ),
}
# Node and worker ids are shortened in tables (their first 16 digits are unique enough);
# task, actor and object ids are not: a task id's first half is its submitter's prefix.
SHORTENED = ("node_id", "worker_id")
ID_WIDTH = 16


@click.command("list")
@click.argument("kind", type=click.Choice(list(KINDS)))
@click.option(
    "--filter",
    "filters",
    multiple=True,
    metavar="KEY=VALUE",
    help="Keep rows whose KEY equals VALUE (KEY!=VALUE: differs); repeatable, all must hold.",
)
@click.option("--limit", type=click.IntRange(1, 1_000_000), default=100, show_default=True)
@address_option
@format_option
def list_state(kind: str, filters: tuple[str, ...], limit: int, address: str | None, fmt: str):
    """List the cluster's nodes, workers, actors, tasks or objects."""
    for f in filters:
        if "=" not in f:
            raise click.BadParameter(
                f"{f!r} is not KEY=VALUE (e.g. state=ALIVE)", param_hint="--filter"
            )
    path, columns = KINDS[kind]
    api = resolve(address)
    rows, last = api.list_all(path, list(filters), limit)
    total = last.get("total", len(rows))

    def render(rows: list[dict]) -> str:
        shown = [
            {
                k: (v[:ID_WIDTH] if k.endswith("_id") and isinstance(v, str) else v)
                for k, v in r.items()
            }
            for r in rows
        ]
        out = table(shown, columns)
        more = f" (showing {len(rows)} of {total}; raise --limit)" if total > len(rows) else ""
        return f"{out}\n\n{len(rows)} {kind}{more}"

    emit(rows, fmt, render)
