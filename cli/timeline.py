"""``ember timeline``: the cluster's tasks as a Chrome trace file, streamed from the
dashboard's ``/api/timeline`` (no cap on the number of tasks)."""

from __future__ import annotations

import datetime
import os
import tempfile

import click
from ember.cli.api_client import cluster_options, resolve
from ember.trace.writer import loss_warnings, trace_info

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
@cluster_options
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
