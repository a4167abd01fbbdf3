"""The driver's side of ``log_to_driver``: print worker lines with Ray's prefixes."""

from __future__ import annotations

import sys


def print_worker_lines(body: dict) -> None:
    title = body.get("title")
    prefix = f"({title} pid={body['pid']})" if title else f"(pid={body['pid']})"
    stream = sys.stderr if body.get("stream") == "stderr" else sys.stdout
    out = "".join(f"{prefix} {line}\n" for line in body["lines"])
    try:
        stream.write(out)
        stream.flush()
    except (ValueError, OSError):
        pass  # the driver closed its stream
