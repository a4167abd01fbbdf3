"""Secrets out of anything shown: a parsed config with every secret-named key's value
replaced by ``***``. One rule for every reader and writer (the autoscaler's status record,
the dashboard's Config view), which may run different versions: the dashboard masks again
what the monitor masked, because it may be reached from other machines."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "***"
# A key naming a secret, in any case, anywhere in the value.
_SECRET_KEY = re.compile(
    r"(password|passwd|secret|token|private_key|api_key|access_key|credential)", re.IGNORECASE
)


def mask_secrets(value: Any) -> Any:
    """A copy of ``value`` with the value of every secret-named key replaced by ``MASK``
    (empty values stay empty: nothing to hide, and the reader sees the key is unset)."""
    if isinstance(value, Mapping):
        return {
            k: MASK if _SECRET_KEY.search(str(k)) and v not in (None, "") else mask_secrets(v)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [mask_secrets(v) for v in value]
    return value
