"""``ember list <resource>``: the cluster's actors, tasks, nodes, workers, objects, jobs,
placement groups, runtime envs or cluster events, as Ray's ``ray list`` shows them, through
``ember.util.state`` (so the command and the library cannot disagree).

``--filter KEY=VALUE`` / ``KEY!=VALUE`` (repeatable, ANDed; values compare without regard to
case) apply before ``--limit``; the table's header says how many rows it shows of how many
matched, and a warning says when the limit cut some.
"""

from __future__ import annotations

from typing import Literal, get_args, get_origin, get_type_hints

import click
from ember.cli.output import dump
from ember.cli.state_format import (
    RULE,
    banner,
    call,
    format_choice,
    grid,
    state_options,
    warn,
)
from ember.util.state import StateClient
from ember.util.state.api import explain
from ember.util.state.common import DEFAULT_LIMIT, SCHEMAS, StateSchema

# The names on the command line: Ray's, with dashes.
RESOURCES = [name.replace("_", "-") for name in SCHEMAS]


def parse_filter(text: str, schema: type[StateSchema]) -> tuple[str, str, str]:
    """``KEY=VALUE`` or ``KEY!=VALUE`` as Ray's ``ray list --filter`` reads it: split at the
    first ``=`` (``!=`` when a ``!`` comes just before it); the key is one of the resource's
    filterable columns, in any case."""
    at = text.find("=")
    negate = at > 0 and text[at - 1] == "!"
    key, value = text[: at - 1 if negate else at], text[at + 1 :]
    if at < 0 or not key or not value:
        raise click.BadParameter(
            f"{text!r} is not KEY=VALUE or KEY!=VALUE (e.g. state=ALIVE)", param_hint="--filter"
        )
    filterable = sorted(schema.filterable_columns())
    column = next((c for c in filterable if c == key.strip().lower()), None)
    if column is None:
        raise click.BadParameter(
            f"{key!r} is not a filter key of {schema.resource.replace('_', '-')}; the keys "
            f"are: {', '.join(filterable)}",
            param_hint="--filter",
        )
    check_value(schema, column, value)
    return column, "!=" if negate else "=", value


def allowed_values(schema: type[StateSchema], column: str) -> tuple[str, ...] | None:
    """The values ``column`` can hold when they are few (a state, a type), from the row
    class's ``Literal`` annotation; None for a free column."""
    hint = get_type_hints(schema).get(column)
    for part in (hint, *get_args(hint)):  # Literal[...] or Literal[...] | None
        if get_origin(part) is Literal:
            return tuple(str(v) for v in get_args(part))
    return None


def check_value(schema: type[StateSchema], column: str, value: str) -> None:
    """Refuses a value ``column`` can never hold (``state=RUNING``) naming the ones it can,
    rather than answering with no rows."""
    allowed = allowed_values(schema, column)
    text = value.strip()
    if allowed is not None and text.upper() not in {a.upper() for a in allowed}:
        raise click.BadParameter(
            f"{column} must be one of {', '.join(allowed)} (not {value!r})",
            param_hint="--filter",
        )
    hint = get_type_hints(schema).get(column)
    kinds = {hint, *get_args(hint)}
    if bool in kinds and text.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise click.BadParameter(
            f"{column} is true or false (not {value!r})", param_hint="--filter"
        )
    if int in kinds and bool not in kinds and not text.lstrip("-").isdigit():
        raise click.BadParameter(
            f"{column} is a whole number (not {value!r})", param_hint="--filter"
        )


@click.command("list")
@click.argument("resource", type=click.Choice(RESOURCES))
@click.option(
    "-f",
    "--filter",
    "filters",
    multiple=True,
    metavar="KEY=VALUE",
    help="Keep rows whose KEY is VALUE (KEY!=VALUE: is not); repeatable, all must hold. "
    "Values compare without regard to case.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 10_000),
    default=DEFAULT_LIMIT,
    show_default=True,
    help="Rows to show at most (after the filters).",
)
@click.option("--detail", is_flag=True, help="Every column (and YAML unless --format says).")
@format_choice(None)
@state_options
def list_state(
    resource: str,
    filters: tuple[str, ...],
    limit: int,
    detail: bool,
    fmt: str | None,
    timeout: int,
    address: str | None,
) -> None:
    """List the cluster's RESOURCE, as `ray list` does."""
    name = resource.replace("-", "_")
    schema = SCHEMAS[name]
    parsed = [parse_filter(f, schema) for f in filters]
    result = call(
        lambda: StateClient().list(
            name, parsed, limit, timeout, detail, raise_on_missing_output=False
        ),
        address,
    )
    columns = schema.list_columns(detail=detail)
    rows = [{c: r.asdict()[c] for c in columns} for r in result.rows]
    fmt = fmt or ("yaml" if detail else "table")  # as Ray's: a detailed list reads better so
    if fmt != "table":
        click.echo(dump(rows, fmt))
        return
    for text in explain(result, name):
        warn(text)
    if not rows:
        among = f" ({result.total} in the cluster)" if parsed else ""
        click.echo(f"No {resource} {'match the filters' if parsed else 'in the cluster'}{among}.")
        return
    total = f"Total: {len(rows)}"
    if result.num_filtered > len(rows):
        total += f" of {result.num_filtered} matching (raise --limit to see more)"
    if parsed:
        total += f"; {result.total} {resource} in the cluster"
    click.echo(
        f"{banner('List')}\nStats:\n{RULE}\n{total}\n\nTable:\n{RULE}\n" + grid(rows, columns)
    )
