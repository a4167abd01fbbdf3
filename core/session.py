"""The session directory: ``<temp_dir>/session_<timestamp>_<pid>/`` with ``logs/`` and
``sockets/``, and a ``session_latest`` link to the newest (Ray's layout of /tmp/ray)."""

from __future__ import annotations

import datetime
import os

# Not /tmp/ember (Ray's is /tmp/ray): a script run from /tmp has /tmp first on sys.path, and
# Python imported that directory as a namespace package "ember" ahead of an editable install.
# A name that is no Python identifier can never be imported.
DEFAULT_TEMP_DIR = "/tmp/ember-sessions"
PACKAGE = "ember"


def check_temp_root(root: str) -> None:
    """Refuses a temp dir named like the package: scripts run from its parent would import
    it instead of Ember."""
    if os.path.basename(os.path.normpath(root)) == PACKAGE:
        parent = os.path.dirname(os.path.abspath(root))
        raise ValueError(
            f"the temp dir {root} is named like the {PACKAGE!r} package: a script run from "
            f"{parent} would import it instead of Ember; pick another name (e.g. "
            f"{os.path.join(parent, PACKAGE + '-tmp')})"
        )


def create_session_dir(temp_dir: str | None = None) -> str:
    root = temp_dir or os.environ.get("EMBER_TMPDIR") or DEFAULT_TEMP_DIR
    check_temp_root(root)
    os.makedirs(root, mode=0o700, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S_%f")
    path = os.path.join(root, f"session_{stamp}_{os.getpid()}")
    os.makedirs(os.path.join(path, "logs"), mode=0o755)
    # Sockets are the local cluster's front door: only this user may connect.
    os.makedirs(os.path.join(path, "sockets"), mode=0o700)
    latest = os.path.join(root, "session_latest")
    tmp_link = f"{latest}.{os.getpid()}"
    try:
        os.symlink(path, tmp_link)
        os.replace(tmp_link, latest)
    except OSError:
        pass
    return path


def socket_path(session_dir: str, name: str) -> str:
    path = os.path.join(session_dir, "sockets", name)
    if len(path) > 100:  # AF_UNIX paths are limited to 108 bytes
        raise ValueError(
            f"The socket path {path!r} is too long for a Unix socket; pass a shorter temp_dir "
            "to ember.init() (--temp-dir to ember start)."
        )
    return path


NODE_INFO_FILE = "node.json"


def write_node_info(session_dir: str, info: dict) -> None:
    """What a driver or tool needs to use this node: addresses, arena, token file, pids.
    The session is also listed in its temp root's ``live`` dir (``live_session_dirs``)."""
    import json

    path = os.path.join(session_dir, NODE_INFO_FILE)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(info, f, indent=1)
    os.replace(tmp, path)
    marker = _live_marker(session_dir)
    try:
        os.makedirs(os.path.dirname(marker), mode=0o700, exist_ok=True)
        with open(marker, "a"):
            pass
    except OSError:
        pass  # tools then miss this node unless given its address


# The sessions of a temp root whose nodes may run: tools look only at these, not at every
# session directory the root has kept (thousands on a machine in use, each a file to read
# and a socket to try, on every `ember status`).
LIVE_DIR = "live"


def _live_marker(session_dir: str) -> str:
    session_dir = os.path.abspath(session_dir)
    return os.path.join(os.path.dirname(session_dir), LIVE_DIR, os.path.basename(session_dir))


def unlist_live_session(session_dir: str) -> None:
    """The node of ``session_dir`` stopped: tools stop looking at it."""
    try:
        os.unlink(_live_marker(session_dir))
    except OSError:
        pass


def live_session_dirs(root: str) -> list[str] | None:
    """The session dirs under ``root`` listed as live (their node may still run); None when
    the root has no list (sessions of an older Ember): look at every session then."""
    try:
        names = os.listdir(os.path.join(root, LIVE_DIR))
    except FileNotFoundError:
        return None
    except OSError:
        return []
    return [os.path.join(root, n) for n in names if n.startswith("session_")]


def read_node_info(session_dir: str) -> dict | None:
    import json

    try:
        with open(os.path.join(session_dir, NODE_INFO_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def temp_roots(temp_dir: str | None = None) -> list[str]:
    """Where to look for this machine's sessions: the temp dir the caller named, else
    ``EMBER_TMPDIR``, else the default (one root: a named one means exactly that one)."""
    return [os.path.abspath(temp_dir or os.environ.get("EMBER_TMPDIR") or DEFAULT_TEMP_DIR)]


def _heads_dir() -> str:
    return os.path.join(DEFAULT_TEMP_DIR, "heads")


def register_head(gcs_address: str, session_dir: str) -> None:
    """Notes where this machine's head of ``gcs_address`` keeps its session, whatever its temp
    dir, so a node or driver started here with another temp dir finds the token."""
    path = os.path.join(_heads_dir(), _marker_name(gcs_address))
    try:
        os.makedirs(_heads_dir(), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        # Readable by this user only: it says where the session (and its token) lives.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(session_dir)
        os.replace(tmp, path)
    except OSError:
        pass  # only a convenience: --token still works


def unregister_head(gcs_address: str, session_dir: str) -> None:
    """Removes the head's note (``register_head``) if it still names ``session_dir``."""
    if registered_head_session(gcs_address) == session_dir:
        try:
            os.unlink(os.path.join(_heads_dir(), _marker_name(gcs_address)))
        except OSError:
            pass


def prune_head_markers(live_sessions: set[str]) -> int:
    """Removes the notes of heads whose session is not among ``live_sessions`` (their GCS is
    gone: stopped, killed); how many were removed."""
    removed = 0
    try:
        names = os.listdir(_heads_dir())
    except OSError:
        return 0
    for name in names:
        path = os.path.join(_heads_dir(), name)
        try:
            with open(path) as f:
                session = f.read().strip()
            if session not in live_sessions:
                os.unlink(path)
                removed += 1
        except OSError:
            continue
    return removed


def _marker_name(gcs_address: str) -> str:
    return gcs_address.replace(":", "_").replace("/", "_")


def registered_head_session(gcs_address: str) -> str | None:
    path = os.path.join(_heads_dir(), _marker_name(gcs_address))
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def registered_head_sessions() -> list[str]:
    """Every session this machine's heads noted (``register_head``), whatever their temp dir."""
    try:
        names = sorted(os.listdir(_heads_dir()))
    except OSError:
        return []
    found = []
    for name in names:
        try:
            with open(os.path.join(_heads_dir(), name)) as f:
                session = f.read().strip()
        except OSError:
            continue
        if session:
            found.append(session)
    return found
