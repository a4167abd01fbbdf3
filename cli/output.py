"""How the CLI prints what it lists or shows: ``--format table|json|yaml``; tables for
reading (values through ``humanize.display``, long cells wrapped), JSON and YAML exact."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from typing import Any

import click
import yaml
from ember.cli.humanize import display

FORMATS = ("table", "json", "yaml")


def format_option(fn: Callable) -> Callable:
    """``--format table|json|yaml``: what every command that lists or shows takes. Tables
    are for reading (local dates, human sizes); JSON and YAML keep the exact values."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="Output format.",
    )(fn)


def cell(v: Any, column: str = "") -> str:
    """One table cell: ``v`` as ``humanize.display`` shows ``column``'s values, on one line."""
    v = display(column, v)
    if v is None:
        return "-"
    if isinstance(v, float):
        text = f"{v:.4g}"
    elif isinstance(v, dict | list):
        text = json.dumps(v, separators=(",", ":"))
    else:
        text = str(v)
    return text.replace("\n", " ")


def table(rows: list[dict[str, Any]], columns: list[str], width: int = 48) -> str:
    """A plain text table: a header of upper-case column names, then a row per record. A
    value wider than ``width`` wraps onto more lines within its column (never cut: the end
    of a message or a command line is often the part that matters)."""
    cells = [[_wrap(cell(r.get(c), c), width) for c in columns] for r in rows]
    widths = [
        max([len(c)] + [len(part) for row in cells for part in row[i]])
        for i, c in enumerate(columns)
    ]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    for row in cells:
        for k in range(max(len(parts) for parts in row)):
            parts = [p[k] if k < len(p) else "" for p in row]
            lines.append("  ".join(v.ljust(w) for v, w in zip(parts, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _wrap(text: str, width: int) -> list[str]:
    # At spaces where it can, inside a word (an id, a path) where it must.
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def dump(data: Any, fmt: str) -> str:
    """``data`` (rows as dicts, or one record) as JSON or YAML, exact, in its key order."""
    if fmt == "json":
        return json.dumps(data, indent=1, default=str)
    return yaml.safe_dump(
        _plain(data),
        sort_keys=False,
        explicit_start=True,
        explicit_end=True,
        default_flow_style=False,
    ).rstrip("\n")


def _plain(data: Any) -> Any:
    """What YAML's safe dumper takes: JSON's types (as ``json.dumps(default=str)`` makes)."""
    return json.loads(json.dumps(data, default=str))


def emit(data: Any, fmt: str, render: Callable[[Any], str]) -> None:
    click.echo(render(data) if fmt == "table" else dump(data, fmt))
