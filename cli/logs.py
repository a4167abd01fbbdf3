"""``ember logs``: the cluster's log files through the dashboard: list them, print the last
lines of the ones that match, or follow one as it grows."""

from __future__ import annotations

import fnmatch
import sys
import threading
from collections.abc import Callable
from typing import Any

import click
from ember.cli.api_client import cluster_options, iter_sse, resolve
from ember.cli.output import dump, emit, format_option, table
from ember.log_format import readable

MAX_FOLLOWED = 8  # files one --follow reads at once, a thread each
LIST_COLUMNS = ["node_id", "name", "component", "pid", "size", "rotated"]


@click.command("logs")
@click.argument("glob", required=False)
@click.option("--node", "node_id", default=None, help="Only this node (id or prefix).")
@click.option("--pid", type=click.IntRange(1), default=None, help="Only this process's files.")
@click.option("--actor", default=None, help="Only this actor's worker (id, prefix or name).")
@click.option(
    "--task-id",
    default=None,
    help="Print only the lines this task printed (its latest attempt's part of its worker's log).",
)
@click.option("--err", is_flag=True, help="With --task-id: its stderr lines, not its stdout.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines (one file).")
@click.option(
    "--tail",
    "lines",
    type=click.IntRange(1, 100_000),
    default=100,
    show_default=True,
    help="How many of the last lines to print.",
)
@click.option(
    "--raw",
    is_flag=True,
    help="Print lines as stored (JSON log lines are otherwise shown as text).",
)
@cluster_options
@format_option
def logs(
    glob: str | None,
    node_id: str | None,
    pid: int | None,
    actor: str | None,
    task_id: str | None,
    err: bool,
    follow: bool,
    lines: int,
    raw: bool,
    address: str | None,
    fmt: str,
) -> None:
    """Without GLOB, --pid or --actor: list the log files. Otherwise print the files'
    last lines (GLOB matches file names, e.g. 'worker-*.err' or raylet.log; rotated files,
    'raylet.log.1', belong to the same component and pid as the live one).

    --format json|yaml prints the listing as an array of files, and the last lines as an
    array of {node_id, name, lines}. Log lines written as JSON (EMBER_LOG_FORMAT=json) print
    as text: time, level, component, ids, message (--raw: as stored)."""
    show = (lambda line: line) if raw else readable
    if follow and fmt != "table":
        raise click.UsageError(f"--follow prints lines as they come; it takes no --format {fmt}")
    api = resolve(address)
    if task_id:
        if follow or glob or pid is not None or actor:
            raise click.UsageError(
                "--task-id prints one task's lines; it takes no GLOB, --pid, --actor or --follow"
            )
        _task_lines(api, task_id, "err" if err else "out", fmt)
        return
    if err:
        raise click.UsageError(
            "--err goes with --task-id (for a worker's stderr, GLOB 'worker-*.err')"
        )
    if actor:
        row = api.get(f"/api/actors/{actor}")
        if not row.get("pid"):
            raise click.ClickException(
                f"actor {actor} has no worker process yet ({row.get('state')})"
            )
        pid, node_id = row["pid"], node_id or row.get("node_id")
    files, _ = api.list_all("/api/logs")
    if node_id:
        files = [f for f in files if str(f.get("node_id", "")).startswith(node_id)]
    if pid is not None:
        files = [f for f in files if f.get("pid") == pid]
    if glob:
        files = [f for f in files if fnmatch.fnmatch(f["name"], glob)]
    if not glob and pid is None and not follow:
        emit(files, fmt, lambda rows: table(rows, LIST_COLUMNS) if rows else "(no log files)")
        return
    if not files:
        what = " ".join(
            x
            for x in (glob or "", f"pid {pid}" if pid else "", f"node {node_id}" if node_id else "")
            if x
        )
        raise click.ClickException(f"no log file matches {what}; `ember logs` lists them")
    if follow:
        if len(files) > MAX_FOLLOWED:
            names = ", ".join(f["name"] for f in files[:MAX_FOLLOWED])
            raise click.ClickException(
                f"--follow takes at most {MAX_FOLLOWED} files and {len(files)} match "
                f"({names}, ...); narrow GLOB, --pid or --node"
            )
        _follow_all(api, files, lines, show)
        return
    tails = []
    for i, f in enumerate(files):
        res = api.get(
            "/api/logs/tail", {"node_id": f["node_id"], "name": f["name"], "lines": lines}
        )
        if fmt != "table":
            tails.append({"node_id": f["node_id"], "name": f["name"], "lines": res["lines"]})
            continue
        if len(files) > 1:
            click.echo(f"{'' if i == 0 else chr(10)}==> {f['name']} (node {f['node_id']}) <==")
        for line in res.get("lines", []):
            click.echo(show(line))
    if fmt != "table":
        click.echo(dump(tails, fmt))


def _task_lines(api: Any, task_id: str, stream: str, fmt: str) -> None:
    """The task's own lines, exactly as printed (its byte range of the worker's file)."""
    res = api.get(f"/api/tasks/{task_id}/log", {"stream": stream})
    if fmt != "table":
        click.echo(dump(res, fmt))
        return
    if res.get("note"):
        raise click.ClickException(f"task {task_id}: {res['note']}")
    if res.get("left_out"):
        click.echo(
            f"(ember) the last {res['left_out']} bytes are left out; `ember logs "
            f"{res['file']} --node {res['node_id'][:12]}` has the whole file",
            err=True,
        )
    click.echo(res.get("text") or "", nl=False)


def _follow_all(
    api: Any, files: list[dict[str, Any]], lines: int, show: Callable[[str], str]
) -> None:
    """One file: its lines as they come. Several (a worker's .out and .err): each followed
    on its own thread, every line prefixed with its file's name, until Ctrl-C."""
    if len(files) == 1:
        try:
            _follow(api, files[0], lines, show)
        except KeyboardInterrupt:
            pass
        return
    lock = threading.Lock()

    def echo(f: dict[str, Any]) -> Callable[[str], None]:
        def out(line: str) -> None:
            with lock:
                click.echo(f"[{f['name']}] {line}")
                sys.stdout.flush()

        return out

    threads = [
        threading.Thread(target=_follow, args=(api, f, lines, show, echo(f)), daemon=True)
        for f in files
    ]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(0.5)
    except KeyboardInterrupt:
        pass


def _follow(
    api: Any,
    f: dict[str, Any],
    lines: int,
    show: Callable[[str], str],
    out: Callable[[str], None] | None = None,
) -> None:
    params = {"node_id": f["node_id"], "name": f["name"], "lines": min(lines, 10_000)}
    if out is None:

        def out(line: str) -> None:
            click.echo(line)
            sys.stdout.flush()

    try:
        while True:
            try:
                # A quiet log is not an error: a read that times out reconnects, from the
                # end of the file (lines=0), until Ctrl-C.
                with api.open("GET", "/api/logs/follow", params, timeout=600) as resp:
                    for event, data in iter_sse(resp):
                        if event in ("missing", "rotated"):
                            click.echo(f"(ember) {f['name']}: {data.get('message')}", err=True)
                            continue
                        for line in data.get("lines", []):
                            out(show(line))
                return  # the dashboard closed the stream (it is stopping)
            except TimeoutError:
                params["lines"] = 0
    except KeyboardInterrupt:
        pass
