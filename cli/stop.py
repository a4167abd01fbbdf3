"""``ember stop``: stop this user's Ember processes on this machine, gracefully then by force.

It stops the processes whose session directory lies under one temp dir: ``--temp-dir``, else
the default one (``EMBER_TMPDIR`` or /tmp/ember-sessions), so a cluster started under another
``--temp-dir`` (another session's, a test's) is left running and named; ``--all`` stops every
Ember process of this user. Idempotent: nothing to stop is not an error.
"""

from __future__ import annotations

import os
import time

import click
from ember.cli.errors import fail
from ember.session_processes import (
    arena_paths,
    clean_leftovers,
    find_ember_processes,
    remove_leftovers,
    session_of_process,
    spill_dirs_of,
    stop_processes,
)


@click.command()
@click.option("--force", "-f", is_flag=True, help="SIGKILL at once instead of SIGTERM first.")
@click.option(
    "--temp-dir",
    default=None,
    help="Stop the processes of sessions under this directory (default: the default temp "
    "dir, EMBER_TMPDIR or /tmp/ember-sessions).",
)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Stop every Ember process of this user on this machine, whatever its temp dir.",
)
@click.option("--grace-period", type=float, default=10.0, show_default=True)
def stop(force: bool, temp_dir: str | None, everything: bool, grace_period: float) -> None:
    """Stop this user's Ember processes under the default temp dir (or --temp-dir, or --all)."""
    from ember.session import temp_roots

    if everything and temp_dir:
        raise click.UsageError("pass --temp-dir DIR or --all, not both")
    # Without either, the default temp dir's: clusters started under other --temp-dirs (other
    # sessions, tests, another tool's) are theirs to stop.
    root = None if everything else temp_roots(temp_dir)[0]
    procs = find_ember_processes(root)
    if not procs:
        clean_leftovers(root)
        click.echo(f"No Ember processes to stop{f' under {root}' if root else ''}.")
        _mention_others(root)
        return
    arenas = arena_paths(procs)
    spill_dirs = spill_dirs_of(procs)
    n = stop_processes(procs, force, grace_period)
    # Workers die with their raylet; wait for them so the command returns with nothing left.
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        rest = find_ember_processes(root)
        if not rest:
            break
        stop_processes(rest, True, 1.0)
    remove_leftovers(arenas, spill_dirs)  # a raylet killed by force leaves them behind
    clean_leftovers(root)
    left = find_ember_processes(root)
    if left:
        fail(f"{len(left)} process(es) would not exit: " + ", ".join(str(p.pid) for p in left))
    click.echo(f"Stopped {n} Ember process(es){f' under {root}' if root else ''}.")
    _mention_others(root)


def _mention_others(root: str | None) -> None:
    """Says which other temp dirs still run Ember processes of this user (left alone)."""
    if root is None:
        return
    others: dict[str, int] = {}
    for p in find_ember_processes(None):
        session = session_of_process(p)
        if session is None:
            continue
        parent = os.path.dirname(os.path.realpath(session))
        if parent != os.path.realpath(root):
            others[parent] = others.get(parent, 0) + 1
    if others:
        listed = ", ".join(f"{d} ({n})" for d, n in sorted(others.items()))
        click.echo(
            f"Left running: Ember processes under other temp dirs: {listed}; stop them with "
            "`ember stop --temp-dir DIR`, or all with `ember stop --all`."
        )
