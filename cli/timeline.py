"""``ember timeline``: the cluster's tasks as a Chrome trace file, streamed from the
dashboard's ``/api/timeline`` (no cap on the number of tasks)."""

from __future__ import annotations

import datetime
import json
import os
import tempfile

import click
from ember.cli.api_client import address_option, resolve

CHUNK = 1 << 16


@click.command("timeline")
@click.option(
    "--output", "-o", default=None, help="The file to write (default: a new file in the temp dir)."
)
@click.option("--job", "job_id", default=None, help="Only this job's tasks (hex id).")
@click.option(
    "--node",
    "node_id",
    default=None,
    help="Only tasks that ran on this node (its id or a unique prefix, as `ember list` prints).",
)
@click.option(
    "--since",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Only the last SECONDS seconds.",
)
@address_option
def timeline(
    output: str | None,
    job_id: str | None,
    node_id: str | None,
    since: float | None,
    address: str | None,
) -> None:
    """Write a Chrome trace of the cluster's tasks (chrome://tracing, Perfetto, speedscope)."""
    api = resolve(address)
    if output is None:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        output = os.path.join(tempfile.gettempdir(), f"ember-timeline-{stamp}.json")
    params = {"job_id": job_id, "node_id": node_id, "last_seconds": since}
    tmp = f"{output}.part"
    try:
        with api.open("GET", "/api/timeline", params, timeout=300) as resp, open(tmp, "wb") as f:
            while chunk := resp.read(CHUNK):
                f.write(chunk)
        os.replace(tmp, output)
    except OSError as e:
        raise click.ClickException(f"could not write {output}: {e}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    info = trace_info(output)
    click.echo(
        f"Trace file written to {output} ({info.get('tasks', '?')} tasks, "
        f"{info.get('spans', 0)} profile spans, {info.get('flows', 0)} arrows)."
    )
    for line in loss_warnings(info):
        click.echo(line, err=True)
    click.echo("Open it in chrome://tracing, https://ui.perfetto.dev or speedscope.")


def loss_warnings(info: dict) -> list[str]:
    """What the trace lacks because the dashboard's bounded stores let it go, from its
    metadata (``ember_trace_info``): one line per kind, saying how to keep more."""
    dropped = {k: v for k, v in (info.get("dropped") or {}).items() if v}
    lines = []
    evicted = dropped.pop("tasks", 0)
    if evicted:
        cap = info.get("max_tasks")
        kept = f"the newest {cap:,}" if isinstance(cap, int) else "a bounded number of"
        lines.append(
            f"Warning: the dashboard keeps {kept} tasks (max_tasks); {evicted:,} older tasks "
            "were evicted and are not in this trace. Set EMBER_DASHBOARD_MAX_TASKS on the head "
            "to keep more."
        )
    during = dropped.pop("tasks_during_export", 0)
    if during:
        lines.append(
            f"Warning: {during:,} tasks were evicted while the trace was written (the cluster "
            "runs tasks faster than the export reads them); they are not in this trace."
        )
    if dropped:
        lines.append(f"Warning: the dashboard's bounded buffers dropped older entries: {dropped}")
    return lines


def trace_info(path: str) -> dict:
    """The trace's last event carries its counts (``ember_trace_info``)."""
    with open(path, "rb") as f:
        f.seek(max(os.path.getsize(path) - 8192, 0))
        tail = f.read().decode("utf-8", "replace")
    for line in reversed(tail.splitlines()):
        if "ember_trace_info" in line:
            try:
                return json.loads(line.lstrip(",").strip())["args"]
            except (ValueError, KeyError):
                break
    return {}
