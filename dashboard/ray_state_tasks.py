"""Ray's task filters answered from the task table's columns, not from a row per task.

A table of a million tasks would cost seconds of the dashboard's one event loop if every
filtered ``/api/v0/tasks`` built each task's row to test it. A filter on a coded column
(state, function, job, node, worker, actor) is decided once per distinct value instead, and
a task id is looked up in the table's index; only the filters left (attempt, pid, type...)
read rows, and only of the tasks the others kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ember.dashboard.ray_state_query import Filter
from ember.dashboard.ray_state_rows import TASK_STATE
from ember.dashboard.task_table import TaskTable

# Ray's column -> the table's coded column holding it.
CODED = {
    "state": "state",
    "name": "name",
    "func_or_class_name": "name",
    "job_id": "job_id",
    "node_id": "node_id",
    "worker_id": "worker_id",
    "actor_id": "actor_id",
}


def _ray_value(column: str, value: Any) -> Any:
    """A coded value as the task's Ray row shows it (``ray_state_rows.task_row``)."""
    if column == "state":
        return TASK_STATE.get(value, value)
    if column in ("node_id", "worker_id", "actor_id"):
        return value or None
    return value or ""


def task_candidates(table: TaskTable, filters: list[Filter]) -> tuple[Iterable[int], list[Filter]]:
    """The slots passing every filter the columns can answer, newest first, and the filters
    left to test on the rows of those slots."""
    rest: list[Filter] = []
    tests = []
    by_id = None
    for f in filters:
        if f.key == "task_id" and not f.negate and by_id is None:
            by_id = f
            continue
        column = CODED.get(f.key)
        if column is None:
            rest.append(f)
            continue
        ok = [f.match(_ray_value(f.key, v)) for v in table.code_tables[column].values]
        tests.append((table.codes[column], ok))
    slots: Iterable[int]
    if by_id is not None:  # every attempt of the task, newest first (as Ray lists them)
        slots = table.attempt_slots(str(by_id.value).lower())[::-1]
    else:
        slots = table.newest_slots()
    if len(tests) == 1:
        codes, ok = tests[0]
        slots = (s for s in slots if ok[codes[s]])
    elif tests:
        slots = (s for s in slots if all(ok[codes[s]] for codes, ok in tests))
    return slots, rest
