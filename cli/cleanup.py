"""``ember cleanup``: removes the stopped sessions a temp root has kept (every ``ember start``
and ``ember.init()`` leaves a session directory of logs behind), never a live one, and says
what it freed. ``ember start`` points here once a root holds many (``start_hint``).

A session is live, and kept, when any process its ``node.json`` names still runs (a
reused pid keeps a stopped session: the safe side; a ``node.json`` naming none is asked on
its raylet's socket), or when it has no ``node.json`` yet and was touched in the last
``STARTING_GRACE`` seconds (a node starting now writes it last).
Sessions listed in the root's ``live/`` dir are judged the same way; a removed session's
listing goes with it.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

import click
from ember.cli.humanize import size
from ember.cli.output import emit, format_option
from ember.process_util import pid_runs

STARTING_GRACE = 600.0
HINT_THRESHOLD = 500  # stopped sessions in a root before `ember start` mentions cleanup
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``90s``, ``2w`` (or a sum: ``1d12h``) in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([smhdw])", text.strip().lower())
    if not parts or "".join(n + u for n, u in parts) != re.sub(r"\s", "", text.lower()):
        raise click.BadParameter(
            f"{text!r} is not an age: a number and a unit, s m h d or w (e.g. 7d, 12h, 1d12h)",
            param_hint="--older-than",
        )
    return sum(float(n) * _UNITS[u] for n, u in parts)


@dataclass
class Scan:
    """A temp root's sessions, sorted by what cleanup does with them."""

    root: str
    stopped: list[tuple[str, int]] = field(default_factory=list)  # (path, bytes)
    live: list[str] = field(default_factory=list)
    newer: list[str] = field(default_factory=list)  # stopped, but not older than asked

    @property
    def bytes(self) -> int:
        return sum(n for _, n in self.stopped)


def session_dirs(root: str) -> list[str]:
    """The session directories right under ``root`` (not ``session_latest``, a link)."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    return [
        e.path
        for e in entries
        if e.name.startswith("session_2") and e.is_dir(follow_symlinks=False)
    ]


def scan(root: str, older_than: float = 0.0, now: float | None = None) -> Scan:
    now = time.time() if now is None else now
    out = Scan(root)
    for path in sorted(session_dirs(root)):
        age = now - _last_touched(path)
        if _is_live(path, age):
            out.live.append(path)
        elif age < older_than:
            out.newer.append(path)
        else:
            out.stopped.append((path, _du(path)))
    return out


def _is_live(path: str, age: float) -> bool:
    import json

    try:
        with open(os.path.join(path, "node.json")) as f:
            info: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        return age < STARTING_GRACE
    except (OSError, ValueError):
        return age < STARTING_GRACE  # being written now, or unreadable: not ours to judge
    pids = [p for p in (info.get("pids") or {}).values() if isinstance(p, int) and p > 0]
    if not pids:  # a node.json that names no process: ask its raylet's socket instead
        from ember.cluster_address import live_node

        return live_node(path) is not None or age < STARTING_GRACE
    return any(pid_runs(pid) for pid in pids)


def _last_touched(path: str) -> float:
    """When the session last changed: its directory, its node.json or its logs dir."""
    newest = 0.0
    for p in (path, os.path.join(path, "node.json"), os.path.join(path, "logs")):
        try:
            newest = max(newest, os.stat(p, follow_symlinks=False).st_mtime)
        except OSError:
            continue
    return newest


def _du(path: str) -> int:
    """Bytes of the files under ``path`` (links not followed, each file counted once)."""
    total = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                else:
                    total += e.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def remove(found: Scan) -> list[str]:
    """Removes the stopped sessions of ``found`` and their ``live/`` listings; the paths
    that could not be removed (another user's files, say)."""
    failed = []
    for path, _ in found.stopped:
        shutil.rmtree(path, ignore_errors=True)
        if os.path.exists(path):
            failed.append(path)
            continue
        try:
            os.unlink(os.path.join(found.root, "live", os.path.basename(path)))
        except OSError:
            pass
    latest = os.path.join(found.root, "session_latest")
    if os.path.islink(latest) and not os.path.exists(latest):
        os.unlink(latest)  # it named a removed session
    return failed


def start_hint(temp_dir: str | None) -> str | None:
    """One line for ``ember start`` when its root holds more than ``HINT_THRESHOLD``
    stopped sessions. Counted without reading any session (a start must stay quick): the
    session dirs less those listed live."""
    from ember.session import LIVE_DIR, temp_roots

    root = temp_roots(temp_dir)[0]
    try:
        names = os.listdir(root)
        live = len(os.listdir(os.path.join(root, LIVE_DIR)))
    except OSError:
        return None
    stopped = sum(n.startswith("session_2") for n in names) - live
    if stopped <= HINT_THRESHOLD:
        return None
    where = f" --temp-dir {root}" if temp_dir else ""
    return (
        f"Note: {root} holds {stopped} stopped sessions; `ember cleanup{where} --dry-run` "
        "shows what removing them frees"
    )


@click.command("cleanup")
@click.option(
    "--older-than",
    "older_than",
    default=None,
    metavar="AGE",
    help="Only sessions unchanged for AGE: 7d, 12h, 30m, 90s, 2w (default: every stopped one).",
)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option(
    "--temp-dir",
    default=None,
    help="The root of the sessions (default: EMBER_TMPDIR, or /tmp/ember-sessions).",
)
@format_option
def cleanup(older_than: str | None, dry_run: bool, temp_dir: str | None, fmt: str) -> None:
    """Remove stopped sessions (their logs, history and GCS file) under the temp root; a
    live session is never touched. Says how many and how many bytes it freed."""
    from ember.session import temp_roots

    age = parse_age(older_than) if older_than else 0.0
    root = temp_roots(temp_dir)[0]
    found = scan(root, age)
    failed = [] if dry_run else remove(found)
    gone = [p for p, _ in found.stopped if p not in failed]
    freed = sum(n for p, n in found.stopped if p not in failed)
    data = {
        "root": root,
        "dry_run": dry_run,
        "removed": [p for p, _ in found.stopped] if dry_run else gone,
        "bytes": found.bytes if dry_run else freed,
        "kept_live": found.live,
        "kept_newer": found.newer,
        "failed": failed,
    }
    emit(data, fmt, _render)
    if failed:
        from ember.cli.errors import fail

        fail(f"could not remove {len(failed)} session(s), e.g. {failed[0]}")


def _render(data: dict[str, Any]) -> str:
    n = len(data["removed"])
    verb = "Would remove" if data["dry_run"] else "Removed"
    lines = [
        f"{verb} {n} stopped session{'s' * (n != 1)} under {data['root']}, "
        f"{'freeing' if not data['dry_run'] else 'which would free'} {size(data['bytes'])} "
        f"({data['bytes']} bytes)."
    ]
    if data["kept_live"]:
        lines.append(f"Kept {len(data['kept_live'])} live: {', '.join(data['kept_live'])}")
    if data["kept_newer"]:
        lines.append(f"Kept {len(data['kept_newer'])} stopped but newer than --older-than.")
    return "\n".join(lines)
