"""Where in the user's code a ref was made, for ``ember memory`` (Ray records this only on
request; a frame walk costs about a microsecond, so Ember always does)."""

from __future__ import annotations

import os
import sys

_EMBER_DIR = os.path.dirname(os.path.abspath(__file__))
_enabled = os.environ.get("EMBER_RECORD_REF_CREATION_SITES", "1") != "0"


def user_call_site(skip: int = 1) -> str:
    """``file:line`` of the innermost frame outside Ember itself. ``skip``: where the walk
    starts, in frames above this function (those below it are Ember's own for certain)."""
    if not _enabled:
        return ""
    frame = sys._getframe(skip)
    while frame is not None and frame.f_code.co_filename.startswith(_EMBER_DIR):
        frame = frame.f_back
    if frame is None:
        return ""
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"
