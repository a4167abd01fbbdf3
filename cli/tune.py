"""``ember tune``: the seed's Tune CLI. ``ls`` (``list-trials``) and ``lsx``
(``list-experiments``) read experiment directories on disk, with Ray's options (``--sort``,
``--output``, ``--filter "<column> <operator> <value>"``, ``--columns``, ``--limit``,
``--desc``); ``stop`` asks a running experiment's driver, through the dashboard, to stop it
or one of its trials."""

from __future__ import annotations

import csv
import datetime
import json
import operator
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import click
from ember.cli.api_client import cluster_options, resolve
from ember.tune.files import STATE_PREFIX, flatten, latest_state

# Ray's DEFAULT_EXPERIMENT_INFO_KEYS + DEFAULT_RESULT_KEYS, with the trial's status (the
# seed's CLI showed it) after its id; every config/<key> follows.
DEFAULT_TRIAL_KEYS = (
    "trainable_name",
    "experiment_tag",
    "trial_id",
    "status",
    "training_iteration",
    "time_total_s",
    "mean_accuracy",
    "mean_loss",
)
DEFAULT_PROJECT_KEYS = ("name", "total_trials", "running_trials", "terminated_trials")
DEFAULT_PROJECT_KEYS += ("error_trials", "last_updated")
OPERATORS = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    ">": operator.gt,
}


def _state(path: Path) -> dict | None:
    try:
        return latest_state(path)
    except (OSError, ValueError):  # half a file from another tool: read as no state
        return None


def _last_result(trial_dir: Path) -> dict:
    try:
        with open(trial_dir / "result.json", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))  # the last line is all that is needed
            lines = f.read().splitlines()
        return json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError, IndexError):
        return {}


def trial_rows(experiment_dir: str) -> list[dict[str, Any]]:
    """One row per trial: its state (from the experiment's state file), its last result and
    config flattened (``config/<key>``), as Ray's ``ExperimentAnalysis.dataframe()``."""
    path = Path(experiment_dir).expanduser()
    if not path.is_dir():
        raise click.ClickException(f"{experiment_dir} is not a directory")
    state = _state(path)
    rows = []
    if state is not None:
        for t in state.get("trials", []):
            last = _last_result(path / t["dirname"]) if t.get("dirname") else {}
            last = last or t.get("last_result") or {}
            row = {
                "trainable_name": t.get("trainable_name"),
                "experiment_tag": t.get("experiment_tag"),
                "trial_id": t.get("trial_id"),
                "status": t.get("status"),
                **{k: v for k, v in flatten(last).items() if not k.startswith("config/")},
                **flatten(t.get("config") or {}, "config/"),
                "logdir": t.get("dirname"),
            }
            rows.append(row)
        return rows
    # No state file (another tool's, or an older run's): each trial directory's result.json.
    for result in sorted(path.glob("*/result.json")):
        last = _last_result(result.parent)
        if last:
            rows.append({**flatten(last), "logdir": result.parent.name})
    if not rows:
        raise click.ClickException(f"No trial data found in {experiment_dir}!")
    return rows


def experiment_rows(project_dir: str) -> list[dict[str, Any]]:
    path = Path(project_dir).expanduser()
    if not path.is_dir():
        raise click.ClickException(f"{project_dir} is not a directory")
    rows = []
    for exp in sorted(p for p in path.iterdir() if p.is_dir()):
        state = _state(exp)
        results = list(exp.glob("*/result.json"))
        if state is None and not results:
            continue
        statuses = [t.get("status") for t in (state or {}).get("trials", [])]
        stamps = [f.stat().st_mtime for f in [*results, *exp.glob(f"{STATE_PREFIX}*.json")]]
        rows.append(
            {
                "name": exp.name,
                "total_trials": len(statuses) if state else len(results),
                "running_trials": statuses.count("RUNNING"),
                "terminated_trials": statuses.count("TERMINATED"),
                "error_trials": statuses.count("ERROR"),
                "last_updated": _when(max(stamps)) if stamps else None,
            }
        )
    if not rows:
        raise click.ClickException(f"No experiments found in {project_dir}!")
    return rows


def _when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S (%A)")


def _filter(rows: list[dict], columns: list[str], filter_op: str) -> list[dict]:
    parts = filter_op.split(" ")
    if len(parts) != 3 or parts[1] not in OPERATORS:
        raise click.ClickException(
            f"--filter {filter_op!r} is not '<column> <operator> <value>' with an operator "
            f"of {' '.join(OPERATORS)} (e.g. --filter 'training_iteration > 3')"
        )
    col, op, raw = parts
    if col not in columns:
        raise click.ClickException(f"--filter: {col} not in: {columns}")
    numeric = any(isinstance(r.get(col), int | float) for r in rows)
    try:
        value: Any = float(raw) if numeric else raw
    except ValueError:
        raise click.ClickException(
            f"--filter: {col} holds numbers, and {raw!r} is not one"
        ) from None
    keep = []
    for r in rows:
        v = r.get(col)
        if v is None:
            continue
        try:
            if OPERATORS[op](v if numeric else str(v), value):
                keep.append(r)
        except TypeError:
            continue
    return keep


def _sort(rows: list[dict], keys: list[str], columns: list[str], desc: bool) -> list[dict]:
    for key in keys:
        if key not in columns:
            raise click.ClickException(f"{key} not in: {columns}")

    def order(r: dict) -> tuple:
        # Missing values last, numbers before text, as pandas' sort_values puts NaN last.
        return tuple(
            (1, 0, 0)
            if r.get(k) is None
            else (0, 0, r[k])
            if isinstance(r[k], int | float)
            else (0, 1, str(r[k]))
            for k in keys
        )

    present = [r for r in rows if all(r.get(k) is not None for k in keys)]
    missing = [r for r in rows if r not in present]
    return sorted(present, key=order, reverse=desc) + missing


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def psql_table(rows: list[dict], columns: list[str]) -> str:
    """The table as ``tabulate(tablefmt="psql")`` draws it (Ray's CLI uses that)."""
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(values: list[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    return "\n".join([rule, line(columns), rule, *(line(r) for r in cells), rule])


def show(rows: list[dict], columns: list[str], output: str | None) -> None:
    """Prints the table (empty columns dropped, then those past the terminal's width, each
    said), and writes ``output`` (.csv or .pkl) with every chosen column."""
    empty = [c for c in columns if all(r.get(c) is None for r in rows)]
    shown = [c for c in columns if c not in empty]
    width = shutil.get_terminal_size(fallback=(100, 100)).columns
    dropped: list[str] = []
    while len(shown) > 1 and len(psql_table(rows, shown).split("\n", 1)[0]) > width:
        dropped.insert(0, shown.pop())
    click.echo(psql_table(rows, shown))
    if dropped:
        click.secho(f"Dropped columns: {dropped}", fg="yellow")
        click.secho("Please increase your terminal size to view remaining columns.")
    if empty:
        click.secho(f"Empty columns: {empty}", fg="yellow")
    if output:
        ext = os.path.splitext(output)[1].lower()
        if ext in (".p", ".pkl", ".pickle"):
            with open(output, "wb") as f:
                pickle.dump([{c: r.get(c) for c in columns} for r in rows], f)
        elif ext == ".csv":
            with open(output, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(rows)
        else:
            raise click.ClickException(f"Unsupported filetype: {output} (use .csv or .pkl)")
        click.secho(f"Output saved at {output}", fg="green")


def _listing(
    rows: list[dict],
    default: list[str],
    sort: str | None,
    output: str | None,
    filter_op: str | None,
    columns: str | None,
    limit: int | None,
    desc: bool,
) -> None:
    every: list[str] = list(dict.fromkeys(k for r in rows for k in r))
    chosen = default
    if columns:
        chosen = [c.strip() for c in columns.split(",") if c.strip()]
        unknown = [c for c in chosen if c not in every]
        if unknown:
            raise click.ClickException(
                f"Provided key invalid: {', '.join(unknown)}. Available keys: {every}."
            )
    if not chosen:
        raise click.ClickException("No columns to output.")
    if filter_op:
        rows = _filter(rows, every, filter_op)
    if sort:
        rows = _sort(rows, [s.strip() for s in sort.split(",")], every, desc)
    if limit:
        rows = rows[:limit]
    show(rows, chosen, output)


def _listing_options(fn: Any) -> Any:
    for option in reversed(
        [
            click.option("--sort", default=None, help="Column(s) to sort on (comma-separated)."),
            click.option(
                "--output", "-o", default=None, help="Also write the rows to a .csv or .pkl file."
            ),
            click.option(
                "--filter",
                "filter_op",
                default=None,
                help="A filter '<column> <operator> <value>', e.g. 'training_iteration > 3'.",
            ),
            click.option("--columns", default=None, help="Columns to show (comma-separated)."),
            click.option(
                "--limit", default=None, type=click.IntRange(min=1), help="Rows to show at most."
            ),
            click.option("--desc", default=False, type=bool, help="Sort descending (true/false)."),
        ]
    ):
        fn = option(fn)
    return fn


@click.group("tune")
def tune() -> None:
    """Tune experiments: list trials and experiments on disk, stop a running one."""


@tune.command("ls")
@click.argument("experiment_path")
@_listing_options
def list_trials(experiment_path: str, **opts: Any) -> None:
    """List the trials of the experiment in EXPERIMENT_PATH (also: list-trials)."""
    rows = trial_rows(experiment_path)
    every = list(dict.fromkeys(k for r in rows for k in r))
    default = [k for k in every if k in DEFAULT_TRIAL_KEYS or k.startswith("config/")]
    default.sort(key=lambda k: DEFAULT_TRIAL_KEYS.index(k) if k in DEFAULT_TRIAL_KEYS else 99)
    _listing(rows, default, **opts)


@tune.command("lsx")
@click.argument("project_path")
@_listing_options
def list_experiments(project_path: str, **opts: Any) -> None:
    """List the experiments in PROJECT_PATH (a storage_path; also: list-experiments)."""
    rows = experiment_rows(project_path)
    _listing(rows, list(DEFAULT_PROJECT_KEYS), **opts)


tune.add_command(list_trials, "list-trials")
tune.add_command(list_experiments, "list-experiments")


@tune.command("stop")
@click.argument("experiment")
@click.option("--trial", "trial_id", default=None, help="Stop only this trial (its id).")
@click.option("--reason", default=None, help="Why (shown on the trial's row in the view).")
@cluster_options
def stop(experiment: str, trial_id: str | None, reason: str | None, address: str | None) -> None:
    """Stop a running experiment (or one of its trials) through the dashboard: its driver
    stops the trials within about a second, and their rows say why."""
    api = resolve(address)
    why = reason or "stopped with `ember tune stop`"
    path = f"/api/tune/experiments/{_quote(experiment)}"
    if trial_id:
        path += f"/trials/{_quote(trial_id)}"
    api.send_json("POST", f"{path}/stop", {"reason": why})
    what = (
        f"trial {trial_id} of experiment {experiment}" if trial_id else f"experiment {experiment}"
    )
    click.echo(f"asked to stop {what} ({why})")


def _quote(part: str) -> str:
    from urllib.parse import quote

    return quote(part, safe="")
