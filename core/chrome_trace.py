"""``ember.timeline()``: the tasks this driver ran, as a Chrome trace (chrome://tracing,
Perfetto, speedscope). A process row per node, a thread row per worker, a slice per task
with its phases nested, as Ray draws it (../shared/reference/ray-2.60-cli-output.md)."""

from __future__ import annotations

import json
import os
from typing import Any

from ember import global_state

_PHASES = (
    ("task:deserialize_arguments", "start", "args_ready", "rail_load"),
    ("task:execute", "args_ready", "executed", "rail_animation"),
    ("task:store_outputs", "executed", "end", "rail_idle"),
)


def chrome_events(worker: Any) -> list[dict[str, Any]]:
    names: dict[bytes, str] = {}
    ip = worker.node.get("node_ip", "127.0.0.1")
    out: list[dict[str, Any]] = []
    for task_id, state, t, _attempt, extra in list(worker.events):
        if extra and "name" in extra and state != "PROFILE":
            names[task_id] = extra["name"]
        if state == "PROFILE":
            data = extra.get("extra") or {}
            span = {
                "cat": extra["event_type"],
                # "name" and "cname" in extra_data override the displayed text and colour.
                "name": data.get("name", extra["event_type"]),
                "pid": ip,
                "tid": "driver"
                if extra.get("pid") == os.getpid()
                else f"worker:{extra.get('pid')}",
                "ts": t * 1e6,
                "dur": (extra["end"] - t) * 1e6,
                "ph": "X",
                "args": dict(data),
            }
            if "cname" in data:
                span["cname"] = data["cname"]
            out.append(span)
            continue
        if state not in ("FINISHED", "FAILED") or not extra or not extra.get("timings"):
            continue
        tm = extra["timings"]
        tid = f"worker:{extra.get('pid', '?')}"
        fn = extra.get("function", "task")
        out.append(
            {
                "cat": f"task::{fn.rsplit('.', 1)[-1]}",
                "name": fn,
                "pid": ip,
                "tid": tid,
                "ts": tm["start"] * 1e6,
                "dur": (tm["end"] - tm["start"]) * 1e6,
                "ph": "X",
                "cname": "generic_work" if state == "FINISHED" else "terrible",
                "args": {"name": fn, "task_id": task_id.hex(), "state": state},
            }
        )
        for name, a, b, color in _PHASES:
            if a in tm and b in tm:
                out.append(
                    {
                        "cat": name,
                        "name": name,
                        "pid": ip,
                        "tid": tid,
                        "ts": tm[a] * 1e6,
                        "dur": (tm[b] - tm[a]) * 1e6,
                        "ph": "X",
                        "cname": color,
                        "args": {},
                    }
                )
    return out


def timeline(filename: str | None = None) -> list[dict[str, Any]] | None:
    worker = global_state.require_worker()
    events = chrome_events(worker)
    if filename is None:
        return events
    with open(filename, "w") as f:
        json.dump(events, f)
    return None
