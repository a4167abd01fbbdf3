"""The cluster token: a secret the head generates, that every TCP peer must present.

Stored as hex text in ``<session_dir>/cluster_token`` (mode 0600) on every node, so processes
of that node (raylet, workers, drivers started there) read it from disk; a node or driver on
another host gets it with ``--token`` or ``EMBER_TOKEN``.
"""

from __future__ import annotations

import os
import secrets

TOKEN_FILE = "cluster_token"
TOKEN_ENV = "EMBER_TOKEN"


def new_token() -> bytes:
    return secrets.token_hex(32).encode()


def write_token(directory: str, token: bytes) -> str:
    """Writes the token owner-only; returns the file's path."""
    path = os.path.join(directory, TOKEN_FILE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask can only narrow the mode; be explicit
        os.write(fd, token + b"\n")
    finally:
        os.close(fd)
    return path


def read_token(path: str) -> bytes:
    with open(path, "rb") as f:
        token = f.read().strip()
    if not token:
        raise ValueError(f"the cluster token file {path} is empty")
    return token


def normalize(token: str | bytes | None) -> bytes | None:
    """A token given by the user (``--token``, ``EMBER_TOKEN``), checked for shape."""
    if token is None or token == "" or token == b"":
        return None
    raw = token.encode() if isinstance(token, str) else token
    raw = raw.strip()
    if not raw or any(c not in b"0123456789abcdefABCDEF" for c in raw):
        raise ValueError(
            "the cluster token must be the hex string from the head's cluster_token file"
        )
    return raw


def user_token(token: str | None = None) -> str | None:
    """The token the user gave: ``--token`` (``token``), else ``EMBER_TOKEN``; None if neither.
    ``EMBER_TOKEN`` is the one variable for every use (joining, drivers, the CLI, dashboards)."""
    for given in (token, os.environ.get(TOKEN_ENV)):
        if given and given.strip():
            return given.strip()
    return None


def dashboard_token(
    session_dir: str | None = None, token_file: str | None = None, token: str | None = None
) -> str | None:
    """The token a dashboard off loopback wants (``dashboard.server.load_token`` picks it):
    the user's (``token``, ``EMBER_TOKEN``); else the cluster token (``token_file``, or the
    session's ``cluster_token``), which a cluster's dashboard uses; else the one a dashboard of
    a non-cluster session wrote to ``<session_dir>/dashboard_token``. None when there is none
    (a loopback dashboard needs none)."""
    given = user_token(token)
    if given:
        return given
    files = [token_file] if token_file else []
    if session_dir:
        files += [os.path.join(session_dir, n) for n in (TOKEN_FILE, "dashboard_token")]
    for path in files:
        try:
            with open(path) as f:
                found = f.read().strip()
        except OSError:
            continue  # not this kind of session, or not readable by this user
        if found:
            return found
    return None
