"""The summaries of Ray's state API (``ray summary tasks|actors|objects``): counts by task
function, actor class and object call site, for the whole cluster (Ray's ``"cluster"`` key).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ember.dashboard.ray_state_rows import TASK_STATE
from ember.dashboard.state import DashboardState
from ember.dashboard.task_columns import STATES, task_type


def task_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Tasks by function (Ray's ``summary_by="func_name"``) from their rows."""
    summary: dict[str, dict[str, Any]] = {}
    totals = Counter()
    for r in rows:
        key = r["name"] or r["func_or_class_name"]
        entry = summary.setdefault(
            key, {"func_or_class_name": key, "type": r["type"], "state_counts": {}}
        )
        counts = entry["state_counts"]
        counts[r["state"]] = counts.get(r["state"], 0) + 1
        totals[r["type"]] += 1
    return _task_totals(summary, totals)


def task_summary_from_table(st: DashboardState) -> tuple[dict[str, Any], int]:
    """The same summary read from the task table's codes, without building a row per task
    (a million tasks cost one pass over three integer columns); and how many tasks."""
    table = st.tasks
    name_codes, state_codes = table.codes["name"], table.codes["state"]
    actor_codes = table.codes["actor_id"]
    names = table.code_tables["name"].values
    actors = table.code_tables["actor_id"].values
    groups: Counter = Counter()
    n = 0
    for s in table.newest_slots():
        groups[(name_codes[s], state_codes[s], bool(actors[actor_codes[s]]))] += 1
        n += 1
    summary: dict[str, dict[str, Any]] = {}
    totals = Counter()
    for (name_code, state_code, is_actor), count in groups.items():
        name = names[name_code] or ""
        kind = task_type(name, is_actor)
        entry = summary.setdefault(
            name, {"func_or_class_name": name, "type": kind, "state_counts": {}}
        )
        state = TASK_STATE.get(STATES[state_code], STATES[state_code])
        entry["state_counts"][state] = entry["state_counts"].get(state, 0) + count
        totals[kind] += count
    return _task_totals(summary, totals), n


def _task_totals(summary: dict[str, Any], totals: Counter) -> dict[str, Any]:
    return {
        "summary": summary,
        "total_tasks": totals["NORMAL_TASK"],
        "total_actor_tasks": totals["ACTOR_TASK"],
        "total_actor_scheduled": totals["ACTOR_CREATION_TASK"],
        "summary_by": "func_name",
    }


def actor_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, dict[str, Any]] = {}
    for r in rows:
        entry = summary.setdefault(
            r["class_name"], {"class_name": r["class_name"], "state_counts": {}}
        )
        entry["state_counts"][r["state"]] = entry["state_counts"].get(r["state"], 0) + 1
    return {"summary": summary, "total_actors": len(rows), "summary_by": "class"}


def object_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, dict[str, Any]] = {}
    workers: dict[str, set] = {}
    nodes: dict[str, set] = {}
    total_mb = 0.0
    for r in rows:
        key = r["call_site"]
        entry = summary.setdefault(
            key,
            {
                "total_objects": 0,
                "total_size_mb": 0.0,
                "total_num_workers": 0,
                "total_num_nodes": 0,
                "task_state_counts": {},
                "task_attempt_number_counts": {},
                "ref_type_counts": {},
            },
        )
        _bump(entry["task_state_counts"], r["task_status"])
        _bump(entry["task_attempt_number_counts"], str(r["attempt_number"]))
        _bump(entry["ref_type_counts"], r["reference_type"])
        entry["total_objects"] += 1
        if r["object_size"] >= 0:  # -1: the size is not known (not made yet)
            entry["total_size_mb"] += r["object_size"] / 1024**2
            total_mb += r["object_size"] / 1024**2
        workers.setdefault(key, set()).add(r["pid"])
        nodes.setdefault(key, set()).add(r["ip"])
    for key, entry in summary.items():
        entry["total_num_workers"] = len(workers[key])
        entry["total_num_nodes"] = len(nodes[key])
    return {
        "summary": summary,
        "total_objects": len(rows),
        "total_size_mb": total_mb,
        "callsite_enabled": all(r["call_site"] != "disabled" for r in rows),
        "summary_by": "callsite",
    }


def _bump(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1
