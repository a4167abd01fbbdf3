"""``ember summary tasks|actors``: counts by function or class and state."""

from __future__ import annotations

from collections import Counter
from typing import Any

import click
from ember.cli.api_client import address_option, emit, format_option, resolve, table

TASK_STATES = (
    "FINISHED",
    "FAILED",
    "RUNNING",
    "SUBMITTED_TO_WORKER",
    "PENDING_NODE_ASSIGNMENT",
    "PENDING_ARGS_AVAIL",
    "RETRYING",
)
ACTOR_STATES = ("ALIVE", "PENDING", "RESTARTING", "DEAD")


@click.command("summary")
@click.argument("kind", type=click.Choice(["tasks", "actors"]))
@address_option
@format_option
def summary(kind: str, address: str | None, fmt: str) -> None:
    """Summarise tasks by function or actors by class, with counts per state."""
    api = resolve(address)
    if kind == "tasks":
        data = api.get("/api/tasks/summary")
        groups = [
            {"name": g["name"], "total": g["total"], **g["states"]} for g in data["by_function"]
        ]
        states = [s for s in TASK_STATES if any(s in g for g in groups)]
        head = f"{data['total']} tasks" + (
            f" ({data['dropped']} older ones dropped by the dashboard)"
            if data.get("dropped")
            else ""
        )
        result: dict[str, Any] = {
            "total": data["total"],
            "by_function": data["by_function"],
            "dropped": data.get("dropped", 0),
        }
        column = "name"
    else:
        rows, _ = api.list_all("/api/actors")
        tally = Counter((r.get("class_name") or "", r.get("state") or "") for r in rows)
        by_class: dict[str, dict[str, int]] = {}
        for (cls, state), n in tally.items():
            by_class.setdefault(cls, {})[state] = n
        groups = sorted(
            ({"class_name": c, "total": sum(s.values()), **s} for c, s in by_class.items()),
            key=lambda g: (-g["total"], g["class_name"]),
        )
        states = [s for s in ACTOR_STATES if any(s in g for g in groups)]
        head = f"{len(rows)} actors"
        result = {"total": len(rows), "by_class": groups}
        column = "class_name"

    def render(_: Any) -> str:
        if not groups:
            return f"{head}\n(none yet)"
        return f"{head}\n\n" + table(groups, [column, "total", *states])

    emit(result, fmt, render)
