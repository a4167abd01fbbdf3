"""Values as a person reads them in the CLI's tables: times as local dates, byte counts in
binary units. JSON and YAML output keeps the exact numbers (a script parses those); only
``table`` goes through ``display``.

A column's kind is known by its name, the names of Ray's state rows and of Ember's REST
rows: ``*_time_ms`` and a job's ``start_time`` / ``end_time`` are epoch milliseconds,
``object_size``, ``size`` and ``*_bytes`` are bytes, and the ``memory`` /
``object_store_memory`` entries of a resources dict are bytes too. Nested records (a
task's ``events``) are shown field by field the same way.
"""

from __future__ import annotations

import datetime
from typing import Any

_MS_COLUMNS = {"start_time", "end_time"}  # a job's times: epoch milliseconds, as Ray's
_SIZE_COLUMNS = {"object_size", "size"}
_RESOURCE_COLUMNS = {"resources_total", "required_resources", "resources"}
BYTE_RESOURCES = ("memory", "object_store_memory")
_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def local_time(ms: float) -> str:
    """Epoch milliseconds as this machine's local date and time, to the millisecond."""
    when = datetime.datetime.fromtimestamp(ms / 1000)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}"


def size(n: float) -> str:
    """``83890176`` -> ``80.0 MiB``; under 1 KiB, whole bytes (``512 B``)."""
    if n < 1024:
        return f"{int(n)} B"
    value = float(n)
    for unit in _UNITS:
        value /= 1024
        if value < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def is_time_column(column: str) -> bool:
    # created_ms: a task event's time, inside the events list.
    return column.endswith("_time_ms") or column in _MS_COLUMNS or column == "created_ms"


def is_size_column(column: str) -> bool:
    return column in _SIZE_COLUMNS or column.endswith("_bytes")


def display(column: str, value: Any) -> Any:
    """``value`` of ``column`` as a table shows it (unchanged when it is no time or size)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        if is_time_column(column):
            return local_time(value) if value > 0 else None  # 0: not yet (Ray's convention)
        if is_size_column(column):
            return size(value) if value >= 0 else "unknown"  # -1: not known (Ray's)
    if column in _RESOURCE_COLUMNS and isinstance(value, dict):
        return {
            k: size(v) if k in BYTE_RESOURCES and isinstance(v, int | float) else v
            for k, v in value.items()
        }
    if isinstance(value, dict):  # a nested record: its fields by their own names
        return {k: display(str(k), v) for k, v in value.items()}
    if isinstance(value, list):
        return [display(column, v) for v in value]
    return value
