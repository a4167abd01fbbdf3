"""Finding a running cluster from a tool process (``ember memory``, ``ember status``):
``--address``, then ``EMBER_ADDRESS``, then the newest live session under the temp dir."""

from __future__ import annotations

import glob
import os
import socket

from ember.session import DEFAULT_TEMP_DIR


def _unix_alive(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def find_gcs_address(address: str | None = None, temp_dir: str | None = None) -> str:
    """The GCS address to use; ConnectionError naming what was tried when there is none."""
    address = address or os.environ.get("EMBER_ADDRESS")
    if address and address != "auto":
        if address.startswith(("unix:", "tcp:")):
            return address
        if "/" in address:
            return "unix:" + address
        return "tcp:" + address
    root = temp_dir or os.environ.get("EMBER_TMPDIR") or DEFAULT_TEMP_DIR
    sessions = sorted(
        glob.glob(os.path.join(root, "session_2*")), key=os.path.getmtime, reverse=True
    )
    for session in sessions:
        sock = os.path.join(session, "sockets", "gcs")
        if os.path.exists(sock) and _unix_alive(sock):
            return "unix:" + sock
    raise ConnectionError(
        f"No running Ember cluster found under {root} (looked for a live GCS socket in its "
        "session directories). Start one with ember.init() or pass --address."
    )
