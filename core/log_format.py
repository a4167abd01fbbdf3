"""How Ember's processes write their own log lines, and how the log readers show them.

Two encodings, as Ray's ``LoggingConfig(encoding="TEXT" | "JSON")``:

- text (the default): ``<time> <LEVEL> <logger> <pid>: <message>``;
- JSON (``EMBER_LOG_FORMAT=json``, or ``ember.init(logging_config=LoggingConfig(
  encoding="JSON"))`` for the node it starts): one object a line with ``time`` (ISO 8601,
  UTC), ``level``, ``component`` (gcs_server, raylet, dashboard, agent, worker), ``node_id``,
  ``job_id`` / ``task_id`` / ``actor_id`` when known, ``logger``, ``pid``, ``message``, and
  ``exc_info`` (the traceback) when there is one. Log aggregators (Loki, Elastic, Vector)
  take it without a parsing rule.

Only Ember's own records change: a worker's ``.out``/``.err`` (the user's prints) stay text,
as in Ray. The node's processes learn their node id from ``EMBER_NODE_ID``, which
``LocalNode`` sets for every process it starts (the workers inherit it from the raylet).

``readable(line)`` turns a JSON line back into one line of text (the log viewer, ``ember
logs``, and the search, which matches inside the message rather than the escaped JSON).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from collections.abc import Callable
from typing import Any

ENV = "EMBER_LOG_FORMAT"
NODE_ENV = "EMBER_NODE_ID"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(process)d: %(message)s"
ENCODINGS = ("TEXT", "JSON")
# The ids a record may carry (``extra={...}`` or the process's context), in this order.
_IDS = ("job_id", "task_id", "actor_id")


def json_enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() == "json"


def check_encoding(encoding: str) -> str:
    """``encoding`` upper-cased; ValueError naming the choices for anything else."""
    value = str(encoding).strip().upper()
    if value not in ENCODINGS:
        raise ValueError(
            f"unknown log encoding {encoding!r}: use one of {', '.join(ENCODINGS)} "
            f"(or set {ENV}=json)"
        )
    return value


class JsonFormatter(logging.Formatter):
    """One JSON object per record. ``context`` (optional) returns the ids the process knows
    at the moment of the record (a worker: its job, the task running on this thread, its
    actor); ids given in a record's ``extra`` win."""

    def __init__(
        self,
        component: str,
        node_id: str | None = None,
        context: Callable[[], dict[str, str | None]] | None = None,
    ) -> None:
        super().__init__()
        self.component = component
        self.node_id = node_id if node_id is not None else os.environ.get(NODE_ENV) or None
        self.context = context

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        out: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "component": self.component,
            "node_id": self.node_id,
        }
        known: dict[str, Any] = {}
        if self.context is not None:
            try:
                known = self.context() or {}
            except Exception:  # a log line must never fail for want of its ids
                known = {}
        for key in _IDS:
            value = getattr(record, key, None) or known.get(key)
            if value:
                out[key] = value
        out["logger"] = record.name
        out["pid"] = record.process
        out["message"] = record.getMessage()
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        # Non-ASCII kept as is (the file is UTF-8); anything odd in an arg becomes its str.
        return json.dumps(out, ensure_ascii=False, default=str)


def formatter(
    component: str, context: Callable[[], dict[str, str | None]] | None = None
) -> logging.Formatter:
    """The formatter for a component's log file: JSON when asked for, else text."""
    if json_enabled():
        return JsonFormatter(component, context=context)
    return logging.Formatter(TEXT_FORMAT)


def component_of(path: str) -> str:
    """``.../logs/raylet.log`` -> ``raylet``; ``worker-<id>-<pid>.log`` -> ``worker``."""
    name = os.path.basename(path).split(".", 1)[0]
    return "worker" if name.startswith("worker-") else name


def parse(line: str) -> dict[str, Any] | None:
    """The record of a JSON log line (one with a ``message``), else None (a text line)."""
    if not line.startswith("{"):
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and "message" in rec else None


def readable(line: str) -> str:
    """A JSON log line as one line of text (time, level, component, the short ids, message,
    then the traceback on following lines); any other line unchanged."""
    rec = parse(line)
    if rec is None:
        return line
    ids = " ".join(
        f"{k.removesuffix('_id')}={str(rec[k])[:12]}" for k in ("node_id", *_IDS) if rec.get(k)
    )
    head = f"{rec.get('time', '')} {rec.get('level', '')} {rec.get('component', '')}"
    text = f"{head}{' [' + ids + ']' if ids else ''}: {rec.get('message', '')}"
    if rec.get("exc_info"):
        text += "\n" + str(rec["exc_info"])
    return text


class LoggingConfig:
    """Ray's ``ray.LoggingConfig``: ``ember.init(logging_config=LoggingConfig(encoding=
    "JSON", log_level="INFO"))`` makes the node that ``init`` starts (its GCS, raylet,
    dashboard, agent and workers) write its log records as JSON at that level."""

    def __init__(self, encoding: str = "TEXT", log_level: str | int = "INFO") -> None:
        self.encoding = check_encoding(encoding)
        level = logging.getLevelName(log_level) if isinstance(log_level, int) else log_level
        if not isinstance(level, str) or not isinstance(logging.getLevelName(level.upper()), int):
            raise ValueError(
                f"unknown log level {log_level!r}: use DEBUG, INFO, WARNING, ERROR or CRITICAL"
            )
        self.log_level = level.upper()

    def node_env(self) -> dict[str, str]:
        """The environment the node's processes read it from."""
        return {ENV: self.encoding.lower(), "EMBER_LOGGING_LEVEL": self.log_level}

    def __repr__(self) -> str:
        return f"LoggingConfig(encoding={self.encoding!r}, log_level={self.log_level!r})"
