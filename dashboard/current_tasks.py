"""What each worker runs now, from the task events: the Machines page's "current task" and
``ember stack``'s header.

The raylet knows a leased worker only by the lease's title (the first task's function, set
when the lease was asked for), so a worker reused for other tasks, or a task given its own
``.options(name=...)``, read wrong from it. The executing worker's RUNNING event says which
attempt it started, under the task's name; the attempt's row in the task table says whether
it is still running. So this keeps, per worker id, the slot of the last attempt it reported
starting, and reads that row when asked (a row reused by a newer task, or a worker never
seen running anything, leaves the raylet's word standing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.dashboard.task_columns import RANK, TERMINAL

if TYPE_CHECKING:
    from ember.dashboard.task_table import TaskTable

MAX_WORKERS = 65_536  # worker ids remembered (the oldest is forgotten first)
_RUNNING = RANK["RUNNING"]
_ENDED = frozenset(RANK[s] for s in TERMINAL)


class CurrentTasks:
    def __init__(self, table: TaskTable) -> None:
        self.table = table
        self._last: dict[str, int] = {}  # {worker_id: slot of the attempt it last started}

    def started(self, worker_id: Any, slot: int) -> None:
        """A worker reported starting the attempt in ``slot`` (its RUNNING event)."""
        if isinstance(worker_id, bytes):
            worker_id = worker_id.hex()
        last = self._last
        last.pop(worker_id, None)  # re-inserted: the dict's order is the age of the news
        last[worker_id] = slot
        if len(last) > MAX_WORKERS:
            del last[next(iter(last))]

    def forget(self, worker_id: str) -> None:
        self._last.pop(worker_id, None)

    def running(self, worker_id: str | None) -> tuple[bool, str | None]:
        """(known, the name of the task it runs now or None when it is between tasks);
        known is False when the events say nothing of this worker."""
        slot = self._last.get(worker_id or "")
        if slot is None:
            return False, None
        table = self.table
        if slot >= len(table) or table.cols["worker_id"][slot] != worker_id:
            return False, None  # the slot went to a newer task of another worker
        state = table.codes["state"][slot]
        if state == _RUNNING:
            return True, table.cols["name"][slot] or None
        if state in _ENDED:
            return True, None
        return False, None

    def view(self, row: dict[str, Any]) -> dict[str, Any]:
        """A worker row (``Worker``) with its current task as the events say, when they do."""
        known, name = self.running(row.get("worker_id"))
        if not known or row.get("kind") != "worker":
            return row
        if row.get("state") == "IDLE":
            # Back in the raylet's pool, leased by no one: idle, whatever it ran last (its
            # end event may still be on its way).
            return {**row, "current_task": None}
        row = dict(row)
        row["current_task"] = name
        if row.get("state") == "ACTOR":
            return row  # its activity names the actor; the method is the current task
        row["activity"] = f"running {name}" if name else "leased, between tasks"
        return row
