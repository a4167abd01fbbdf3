"""``ember job submit|status|logs|stop|list|delete``: jobs on a cluster, as ``ray job`` runs
them, on ``ember.job_submission.JobSubmissionClient`` (the dashboard's Jobs REST API).

``submit`` without ``--no-wait`` prints the job's output as it comes and exits with the job's
outcome: 0 when it SUCCEEDED, 1 otherwise (a failed job's message goes to stderr). Its
ENTRYPOINT words are joined as Ray's ``ray job submit`` joins them (``shlex.join``), so
``-- python -c "print('a b')"`` reaches the shell as typed; one word is taken as it is, a
whole command line in quotes (``-- "python x.py && echo done"``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import time
from collections.abc import Iterator
from typing import Any

import click
import yaml
from ember.cli.api_client import cli_words, cluster_options, resolve
from ember.cli.errors import INTERRUPTED, fail
from ember.cli.output import emit, format_option, table
from ember.cli.terminal import Spinner
from ember.job_submission import JobRequestError, JobStatus, JobSubmissionClient
from ember.rest_client import DashboardClient

LIST_COLUMNS = ["submission_id", "status", "entrypoint", "start_time", "end_time", "message"]


def _client(address: str | None) -> JobSubmissionClient:
    api = resolve(address)  # the command's --address, --token and --temp-dir
    # A plain client: the job client reads some refusals as answers (404: no such package),
    # which the CLI's own client would turn into an exit.
    dashboard = DashboardClient(api.url, api.token, api.timeout, api.session_dir, api.note)
    with asking():
        return JobSubmissionClient(_dashboard=dashboard)


@contextlib.contextmanager
def asking(job_id: str | None = None) -> Iterator[None]:
    """The job client's failures as the CLI words them: an unknown job names the command
    that lists jobs, a refusal gives the dashboard's reason (not the REST route asked)."""
    try:
        yield
    except JobRequestError as e:
        if e.status == 404 and job_id is not None:
            raise click.ClickException(
                f"no job {job_id!r} in the cluster; `ember job list` lists them"
            ) from None
        raise click.ClickException(cli_words(e.reason)) from None
    except (RuntimeError, ValueError, ConnectionError) as e:
        raise click.ClickException(str(e)) from None


def _json_option(value: str | None, what: str) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as e:
        raise click.BadParameter(f"{what} is not JSON: {e}") from None


@click.group("job")
def job() -> None:
    """Submit, watch and stop jobs on a cluster (as `ray job`)."""


@job.command("submit", context_settings={"ignore_unknown_options": True})
@cluster_options
@click.option("--submission-id", default=None, help="The job's id (default: generated).")
@click.option("--working-dir", default=None, help="A local directory, uploaded for the job.")
@click.option("--runtime-env", "runtime_env_file", default=None, help="A YAML runtime_env file.")
@click.option("--runtime-env-json", default=None, help="The runtime_env as JSON.")
@click.option("--metadata-json", default=None, help="Metadata as a JSON object of strings.")
@click.option("--entrypoint-num-cpus", type=float, default=None)
@click.option("--entrypoint-num-gpus", type=float, default=None)
@click.option("--entrypoint-memory", type=int, default=None, help="Bytes.")
@click.option("--entrypoint-resources", default=None, help="Custom resources as JSON.")
@click.option(
    "--entrypoint-label-selector",
    default=None,
    help='Node labels the entrypoint needs, as JSON, e.g. \'{"zone": "in(a,b)"}\'.',
)
@click.option("--no-wait", is_flag=True, help="Return once submitted; do not follow its logs.")
@click.argument("entrypoint", nargs=-1, required=True, type=click.UNPROCESSED)
def submit(
    address: str | None,
    submission_id: str | None,
    working_dir: str | None,
    runtime_env_file: str | None,
    runtime_env_json: str | None,
    metadata_json: str | None,
    entrypoint_num_cpus: float | None,
    entrypoint_num_gpus: float | None,
    entrypoint_memory: int | None,
    entrypoint_resources: str | None,
    entrypoint_label_selector: str | None,
    no_wait: bool,
    entrypoint: tuple[str, ...],
) -> None:
    """Submit ENTRYPOINT (a shell command, after `--`) as a job."""
    runtime_env: dict[str, Any] = {}
    if runtime_env_file:
        with open(runtime_env_file) as f:
            runtime_env = yaml.safe_load(f) or {}
    if runtime_env_json:
        runtime_env = _json_option(runtime_env_json, "--runtime-env-json")
    if working_dir:
        runtime_env["working_dir"] = working_dir
    client = _client(address)
    with asking():
        sid = client.submit_job(
            entrypoint=entrypoint_line(entrypoint),
            submission_id=submission_id,
            runtime_env=runtime_env or None,
            metadata=_json_option(metadata_json, "--metadata-json"),
            entrypoint_num_cpus=entrypoint_num_cpus,
            entrypoint_num_gpus=entrypoint_num_gpus,
            entrypoint_memory=entrypoint_memory,
            entrypoint_resources=_json_option(entrypoint_resources, "--entrypoint-resources"),
            entrypoint_label_selector=_json_option(
                entrypoint_label_selector, "--entrypoint-label-selector"
            ),
        )
    click.echo(f"Job '{sid}' submitted successfully", err=True)
    if no_wait:
        click.echo(sid)
        return
    _wait_started(client, sid)
    _follow(client, sid)
    _exit_with_outcome(client, sid)


def entrypoint_line(words: tuple[str, ...]) -> str:
    """The shell command of ENTRYPOINT's words: quoted and joined as ``ray job submit`` does
    (``shlex.join``), except one word, which is a command line as given (Ray 2.60 quotes that
    too, so ``-- "python x.py"`` runs a program named "python x.py"; as given it runs)."""
    return words[0] if len(words) == 1 else shlex.join(words)


def _wait_started(client: JobSubmissionClient, sid: str) -> None:
    """While the job is PENDING (its entrypoint waits for resources or its runtime env): a
    spinner on a terminal saying so, nothing on a pipe. Ctrl-C leaves the job as it is."""
    with Spinner(f"waiting for job '{sid}' to start") as spin:
        try:
            while True:
                info = _get(client, sid)
                if info.status is not JobStatus.PENDING:
                    return
                spin.note = info.message or ""
                time.sleep(0.2)
        except KeyboardInterrupt:
            spin.stop()
            _left_running(sid)


def _left_running(sid: str) -> None:
    click.echo(f"\n(ember) stopped following; the job runs on: ember job stop {sid}", err=True)
    raise SystemExit(INTERRUPTED)


def _follow(client: JobSubmissionClient, sid: str) -> None:
    async def run() -> None:
        async for chunk in client.tail_job_logs(sid):
            click.echo(chunk, nl=False)

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        _left_running(sid)


def _exit_with_outcome(client: JobSubmissionClient, sid: str) -> None:
    deadline = time.monotonic() + 30  # the tail ends with the job: its status follows at once
    info = client.get_job_info(sid)
    while not info.status.is_terminal() and time.monotonic() < deadline:
        time.sleep(0.2)
        info = client.get_job_info(sid)
    if info.status is JobStatus.SUCCEEDED:
        click.echo(f"Job '{sid}' succeeded", err=True)
        return
    fail(f"Job '{sid}' {str(info.status).lower()}: {info.message or ''}")


@job.command("status")
@cluster_options
@format_option
@click.argument("job_id")
def status(address: str | None, fmt: str, job_id: str) -> None:
    """The job's status and message (json/yaml: every field of the job)."""
    info = _get(_client(address), job_id)
    emit(dict(info), fmt, lambda _: _status_lines(job_id, info))


def _status_lines(job_id: str, info: Any) -> str:
    lines = [f"Status for job '{job_id}': {info.status}"]
    if info.message:
        lines.append(f"Status message: {info.message}")
    return "\n".join(lines)


@job.command("logs")
@cluster_options
@click.option("-f", "--follow", is_flag=True, help="Follow the logs until the job ends.")
@click.argument("job_id")
def logs(address: str | None, follow: bool, job_id: str) -> None:
    """The job's output (its entrypoint's stdout and stderr)."""
    client = _client(address)
    _get(client, job_id)
    if follow:
        _follow(client, job_id)
        return
    with asking(job_id):
        click.echo(client.get_job_logs(job_id), nl=False)


@job.command("stop")
@cluster_options
@click.option("--no-wait", is_flag=True, help="Do not wait for it to have stopped.")
@click.argument("job_id")
def stop(address: str | None, no_wait: bool, job_id: str) -> None:
    """Stop the job (SIGTERM to its processes, then SIGKILL after a grace)."""
    client = _client(address)
    with asking(job_id):
        stopped = client.stop_job(job_id)
    if not stopped:
        click.echo(f"Job '{job_id}' had already ended ({_get(client, job_id).status})")
        return
    click.echo(f"Stopping job '{job_id}'")
    if no_wait:
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        info = _get(client, job_id)
        if info.status.is_terminal():
            click.echo(f"Job '{job_id}' {str(info.status).lower()}")
            return
        time.sleep(0.5)
    raise click.ClickException(
        f"job '{job_id}' did not stop within 60 s; see `ember job status {job_id}`"
    )


@job.command("list")
@cluster_options
@format_option
def list_jobs(address: str | None, fmt: str) -> None:
    """Every job the cluster knows, submitted or started by hand (the table's times are
    local; json/yaml keep Ray's epoch milliseconds)."""
    with asking():
        jobs = [dict(j) for j in _client(address).list_jobs()]
    emit(jobs, fmt, lambda rows: table(rows, LIST_COLUMNS) if rows else "(no jobs)")


@job.command("delete")
@cluster_options
@click.argument("job_id")
def delete(address: str | None, job_id: str) -> None:
    """Forget an ended job (its record and logs)."""
    with asking(job_id):
        deleted = _client(address).delete_job(job_id)
    click.echo(f"Job '{job_id}' deleted" if deleted else f"Job '{job_id}' was not deleted")


def _get(client: JobSubmissionClient, job_id: str) -> Any:
    with asking(job_id):
        return client.get_job_info(job_id)
