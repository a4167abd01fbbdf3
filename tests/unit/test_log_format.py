"""``ember.log_format``: a record as one JSON line (ids, the traceback as a field) and back as
text for the readers; other lines pass through unchanged."""

from __future__ import annotations

import json
import logging

from ember.log_format import JsonFormatter, component_of, parse, readable

NODE = "ab" * 16
TASK = "cd" * 12


def _record(msg: str, *args, exc_info=None, **extra) -> logging.LogRecord:
    rec = logging.LogRecord("ember.core", logging.ERROR, __file__, 1, msg, args, exc_info)
    rec.__dict__.update(extra)
    return rec


def test_json_line_with_ids_and_traceback():
    try:
        raise ValueError("bad value")
    except ValueError:
        import sys

        exc = sys.exc_info()
    fmt = JsonFormatter("raylet", node_id=NODE, context=lambda: {"job_id": "01000000"})
    line = fmt.format(_record('lease %s failed: "%s"', 7, "naïve", exc_info=exc, task_id=TASK))
    assert "\n" not in line
    rec = json.loads(line)
    assert rec["message"] == 'lease 7 failed: "naïve"'
    assert (rec["level"], rec["component"], rec["node_id"]) == ("ERROR", "raylet", NODE)
    assert (rec["job_id"], rec["task_id"]) == ("01000000", TASK)
    assert "actor_id" not in rec  # unknown ids are left out, not null
    assert rec["exc_info"].startswith("Traceback") and "ValueError: bad value" in rec["exc_info"]
    text = readable(line)
    first, *rest = text.splitlines()
    assert first.endswith(
        f'ERROR raylet [node={NODE[:12]} job=01000000 task={TASK[:12]}]: lease 7 failed: "naïve"'
    )
    assert rest[-1] == "ValueError: bad value"


def test_a_failing_context_still_logs():
    def broken() -> dict:
        raise RuntimeError("no worker yet")

    rec = json.loads(JsonFormatter("worker", node_id=NODE, context=broken).format(_record("hi")))
    assert (rec["message"], rec["node_id"]) == ("hi", NODE)


def test_other_lines_pass_through():
    for line in (
        "2026-01-01 00:00:00,000 INFO ember.raylet 12: started",
        '{"not": "a log record"}',
        "{broken json",
        "",
    ):
        assert readable(line) == line
        assert parse(line) is None


def test_component_of_file_names():
    assert component_of("/s/logs/gcs_server.log") == "gcs_server"
    assert component_of("/s/logs/worker-0123abcd-42.log") == "worker"
    assert component_of("agent.log") == "agent"
