"""The session directory: ``<temp_dir>/session_<timestamp>_<pid>/`` with ``logs/`` and
``sockets/``, and a ``session_latest`` link to the newest (Ray's layout, 002 §5.4.2)."""

from __future__ import annotations

import datetime
import os

DEFAULT_TEMP_DIR = "/tmp/ember"


def create_session_dir(temp_dir: str | None = None) -> str:
    root = temp_dir or os.environ.get("EMBER_TMPDIR") or DEFAULT_TEMP_DIR
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
            "to ember.init()."
        )
    return path
