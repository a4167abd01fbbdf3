"""What ``ember list``, ``ember get`` and ``ember summary`` share: their options, the call
into ``ember.util.state`` with its errors as click's, and the table / JSON / YAML output.

Tables print every value in full, ids above all: a task id's first half is its job's and
the same on every row, so a cut id tells rows apart no better than none.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import click
from ember.cli.api_client import address_option, resolve
from ember.cli.output import FORMATS, cell
from ember.util.state import StateApiException
from ember.util.state.api import using_dashboard
from ember.util.state.common import DEFAULT_RPC_TIMEOUT

RULE = "-" * 30


def state_options(fn: Callable) -> Callable:
    """``--address`` and ``--timeout``, as Ray's state commands have them."""
    fn = click.option(
        "--timeout",
        type=click.IntRange(1, 3600),
        default=DEFAULT_RPC_TIMEOUT,
        show_default=True,
        help="Seconds the query may take.",
    )(fn)
    return address_option(fn)


def format_choice(default: str | None) -> Callable:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default=default,
        help="Output format" + (f" (default: {default})." if default else "."),
    )


def call(query: Callable[[], Any], address: str | None) -> Any:
    """``query()`` on the dashboard the command's options name (``--address``, ``--token``,
    ``--temp-dir``), its failure a one-line error (exit 1) rather than a traceback."""
    with using_dashboard(resolve(address)):
        try:
            return query()
        except StateApiException as e:
            raise click.ClickException(str(e)) from None


def grid(rows: list[dict[str, Any]], columns: list[str], index: bool = True) -> str:
    """A plain table: upper-case headers, then a line a row (numbered like Ray's), every
    value whole (an id is no use cut) and shown as ``humanize.display`` shows its column."""
    head = [c.upper() for c in columns]
    body = [[cell(r.get(c), c) for c in columns] for r in rows]
    if index:
        head = ["", *head]
        body = [[str(i), *line] for i, line in enumerate(body)]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
        for line in [head, *body]
    )


def banner(title: str) -> str:
    return f"{'=' * 8} {title}: {datetime.now():%Y-%m-%d %H:%M:%S} {'=' * 8}"


def warn(text: str) -> None:
    click.echo(f"Warning: {text}", err=True)
