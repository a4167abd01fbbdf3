"""``ember archive``: a session's history, logs and GCS file packed into one ``.tar.gz``
(``dashboard/history_archive.py``), for ``ember dashboard --history FILE``."""

from __future__ import annotations

import glob
import os

import click
from ember.cli.api_client import cluster_options, cluster_settings, resolve
from ember.cli.errors import USAGE
from ember.cli.terminal import Spinner


class ArchiveUsageError(click.ClickException):
    """Bad input: exit status 2, as click's own usage errors."""

    exit_code = USAGE


@click.command("archive")
@click.argument("session_dir", required=False)
@click.option(
    "-o",
    "--output",
    required=True,
    metavar="FILE.tar.gz",
    help="The archive to write (a new file: never overwritten).",
)
@cluster_options
def archive(session_dir: str | None, output: str, address: str | None) -> None:
    """Pack a session's history, logs (the other nodes' shipped logs too) and GCS state into
    one archive that `ember dashboard --history FILE` serves. SESSION_DIR defaults to the
    running cluster's (--address) or this machine's newest session. A running cluster is
    packed as it is on disk at that moment (said so in the archive)."""
    from ember.cluster_address import live_node
    from ember.dashboard.history_archive import ArchiveError, pack

    if session_dir is not None and address is not None:
        raise ArchiveUsageError("give SESSION_DIR or --address, not both")
    if session_dir is None:
        session_dir = _cluster_session(address) if address else _newest_session()
        click.echo(f"session: {session_dir}", err=True)
    running = live_node(os.path.realpath(os.path.expanduser(session_dir))) is not None
    try:
        with Spinner(f"packing {os.path.basename(os.path.normpath(session_dir))}"):
            packed = pack(session_dir, output, running)
    except ArchiveError as e:
        raise ArchiveUsageError(str(e)) from None
    except OSError as e:
        raise click.ClickException(f"could not write {output}: {e}") from None
    if running:
        click.echo(
            "the cluster is running: packed a snapshot of what it had written to disk so far "
            "(history up to its last flush, logs up to their size when read)",
            err=True,
        )
    for line in packed.skipped:
        click.echo(f"skipped {line}", err=True)
    click.echo(
        f"packed {packed.files} files ({packed.bytes} bytes, {packed.archive_bytes} "
        f"compressed) of {packed.session_dir} into {packed.path}"
    )


def _cluster_session(address: str) -> str:
    """The session directory of the head at ``address``, which must be on this machine."""
    api = resolve(address)
    found = api.get("/api/version", timeout=10).get("session_dir")
    if not found or not os.path.isdir(found):
        raise ArchiveUsageError(
            f"the head of the cluster at {address} keeps its session ({found or 'unknown'}) "
            "on another machine: run `ember archive` there"
        )
    return found


def _newest_session() -> str:
    """This machine's running head's session, else the newest head session (one with a
    history or a GCS file) under the temp dir."""
    from ember.cluster_address import live_local_nodes
    from ember.dashboard.history_archive import SQLITE_FILE
    from ember.dashboard.history_format import HISTORY_DIR
    from ember.session import temp_roots

    _, temp_dir = cluster_settings()
    for node in live_local_nodes(temp_dir):
        if node.get("head") and node.get("session_dir"):
            return node["session_dir"]
    roots = temp_roots(temp_dir)
    found = [
        d
        for root in roots
        for d in glob.glob(os.path.join(root, "session_2*"))
        if not os.path.islink(d)
        and any(os.path.exists(os.path.join(d, n)) for n in (HISTORY_DIR, SQLITE_FILE))
    ]
    if not found:
        raise ArchiveUsageError(
            f"no head session under {', '.join(roots)}: give SESSION_DIR, or --temp-dir "
            "where the cluster kept its sessions"
        )
    return max(found, key=os.path.getmtime)
