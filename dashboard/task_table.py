"""The task table: one compact record per task, built from the owners' task events.

Sized for a million tasks in a few hundred MB: a record is a ``__slots__`` object holding one
time per phase (not a list of events), strings are interned, and the table keeps per-state,
per-function, per-node and per-job counts so a filtered page knows its total without a scan.
Past ``cap`` the oldest task goes first and ``dropped`` counts it.

Rules:
- events may arrive out of order (owners flush independently): a terminal state
  (FINISHED, FAILED) is never overwritten by an earlier phase;
- a RETRYING event re-opens a task (its attempt grows).
"""

from __future__ import annotations

import sys
from collections import Counter, deque
from collections.abc import Iterator
from operator import attrgetter
from typing import Any

from ember.dashboard.query import Predicate, QueryError

# Ember's phases, in order (Ray's TaskStatus names where they exist).
STATES = (
    "PENDING_ARGS_AVAIL",
    "PENDING_NODE_ASSIGNMENT",
    "SUBMITTED_TO_WORKER",
    "RUNNING",
    "RETRYING",
    "FINISHED",
    "FAILED",
)
TERMINAL = frozenset({"FINISHED", "FAILED"})
_RANK = {s: i for i, s in enumerate(STATES)}
# Fields a task list can filter and sort on (the public row's keys).
FIELDS = (
    "task_id",
    "name",
    "state",
    "job_id",
    "actor_id",
    "node_id",
    "worker_id",
    "pid",
    "attempt",
    "type",
    "submitted_time",
    "start_time",
    "end_time",
    "duration_s",
    "error",
)
_COUNTED = ("state", "name", "node_id", "job_id")


class TaskRecord:
    __slots__ = (
        "task_id",
        "name",
        "state",
        "job_id",
        "actor_id",
        "node_id",
        "worker_id",
        "pid",
        "attempt",
        "error",
        "t_pending",
        "t_scheduled",
        "t_start",
        "t_args",
        "t_executed",
        "t_end",
    )

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.name = ""
        self.state = "PENDING_ARGS_AVAIL"
        self.job_id = ""
        self.actor_id: str | None = None
        self.node_id: str | None = None
        self.worker_id: str | None = None
        self.pid: int | None = None
        self.attempt = 0
        self.error: str | None = None
        self.t_pending: float | None = None
        self.t_scheduled: float | None = None
        self.t_start: float | None = None
        self.t_args: float | None = None
        self.t_executed: float | None = None
        self.t_end: float | None = None

    def public(self) -> dict[str, Any]:
        start, end = self.t_start, self.t_end
        return {
            "task_id": self.task_id,
            "name": self.name,
            "state": self.state,
            "job_id": self.job_id,
            "actor_id": self.actor_id,
            "node_id": self.node_id,
            "worker_id": self.worker_id,
            "pid": self.pid,
            "attempt": self.attempt,
            "type": "ACTOR_TASK" if self.actor_id else "NORMAL_TASK",
            "submitted_time": self.t_pending,
            "start_time": start,
            "end_time": end,
            "duration_s": (end - start) if start is not None and end is not None else None,
            "error": self.error,
        }

    def events(self) -> list[dict[str, Any]]:
        """The task's phases with their times (the detail view and the timeline)."""
        out = []
        for state, t in (
            ("PENDING_ARGS_AVAIL", self.t_pending),
            ("SUBMITTED_TO_WORKER", self.t_scheduled),
            ("RUNNING", self.t_start),
            ("ARGS_FETCHED", self.t_args),
            ("EXECUTED", self.t_executed),
            (self.state if self.state in TERMINAL else "END", self.t_end),
        ):
            if t is not None:
                out.append({"state": state, "time": t})
        return out


_SLOTS = frozenset(TaskRecord.__slots__)


class TaskTable:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.tasks: dict[str, TaskRecord] = {}  # {task_id hex: record}, oldest first
        self._order: deque[str] = deque()  # ids in arrival order, for eviction
        self.dropped = 0
        self.counts: dict[str, Counter] = {k: Counter() for k in _COUNTED}
        self.by_name_state: Counter = Counter()  # {(name, state): n} for the summary

    def __len__(self) -> int:
        return len(self.tasks)

    # -- ingestion -------------------------------------------------------------------------
    def apply(
        self,
        task_id: str,
        state: str,
        t: float,
        attempt: int,
        extra: dict[str, Any] | None,
        *,
        job_id: str = "",
        node_id: str | None = None,
    ) -> TaskRecord:
        """Applies one event; ``node_id`` is where the task ran, when the caller knows it."""
        rec = self.tasks.get(task_id)
        if rec is None:
            rec = self._insert(task_id, job_id)
        old = (rec.state, rec.name, rec.node_id)
        if extra:
            name = extra.get("name") or extra.get("function")
            if name and not rec.name:
                rec.name = sys.intern(name)
            # Interned: a million tasks share a few thousand worker and actor ids.
            if extra.get("actor_id"):
                rec.actor_id = sys.intern(extra["actor_id"])
            if extra.get("worker_id"):
                rec.worker_id = sys.intern(extra["worker_id"])
            if extra.get("pid"):
                rec.pid = extra["pid"]
            if extra.get("node_id"):
                rec.node_id = extra["node_id"]
            if extra.get("error"):
                rec.error = str(extra["error"])[:4000]
            tm = extra.get("timings")
            if tm:
                rec.t_start = tm.get("start", rec.t_start)
                rec.t_args = tm.get("args_ready", rec.t_args)
                rec.t_executed = tm.get("executed", rec.t_executed)
                rec.t_end = tm.get("end", rec.t_end)
        if state == "RETRYING":
            rec.attempt = max(rec.attempt, attempt)
            rec.state = "RETRYING"
        elif state in _RANK:
            if rec.state not in TERMINAL or attempt > rec.attempt:
                if _RANK[state] >= _RANK.get(rec.state, 0) or attempt > rec.attempt:
                    rec.state = state
                    rec.attempt = max(rec.attempt, attempt)
        if state == "PENDING_ARGS_AVAIL" and rec.t_pending is None:
            rec.t_pending = t
        elif state == "SUBMITTED_TO_WORKER":
            rec.t_scheduled = t
        elif state in TERMINAL and rec.t_end is None:
            rec.t_end = t
        if rec.node_id is None and node_id:
            rec.node_id = node_id
        self._recount(rec, old)
        return rec

    def _insert(self, task_id: str, job_id: str) -> TaskRecord:
        if len(self.tasks) >= self.cap:
            self._evict_oldest()
        rec = TaskRecord(task_id)
        rec.job_id = sys.intern(job_id) if job_id else ""
        self.tasks[task_id] = rec
        self._order.append(task_id)
        self.counts["state"][rec.state] += 1
        self.counts["name"][rec.name] += 1
        self.counts["node_id"][rec.node_id] += 1
        self.counts["job_id"][rec.job_id] += 1
        self.by_name_state[(rec.name, rec.state)] += 1
        return rec

    def _evict_oldest(self) -> None:
        while self._order:
            rec = self.tasks.pop(self._order.popleft(), None)
            if rec is not None:
                for key in _COUNTED:
                    _dec(self.counts[key], getattr(rec, key))
                _dec(self.by_name_state, (rec.name, rec.state))
                self.dropped += 1
                return

    def _recount(self, rec: TaskRecord, old: tuple) -> None:
        state, name, node = old
        if (state, name, node) == (rec.state, rec.name, rec.node_id):
            return
        for key, before in (("state", state), ("name", name), ("node_id", node)):
            after = getattr(rec, key)
            if before != after:
                _dec(self.counts[key], before)
                self.counts[key][after] += 1
        if (name, state) != (rec.name, rec.state):
            _dec(self.by_name_state, (name, state))
            self.by_name_state[(rec.name, rec.state)] += 1

    # -- queries ---------------------------------------------------------------------------
    def newest_first(self) -> Iterator[TaskRecord]:
        return reversed(self.tasks.values())

    def page(
        self,
        predicates: list[Predicate],
        limit: int,
        offset: int,
        sort_by: str | None,
        descending: bool,
    ) -> dict[str, Any]:
        """Newest first unless ``sort_by``; stops early when the total is known from counts."""
        from ember.dashboard.query import page as generic_page

        for p in predicates:
            if p.key not in FIELDS:
                raise QueryError("filter", f"unknown task field {p.key!r}")
        if sort_by is not None:
            return generic_page(
                (r.public() for r in self.newest_first()),
                predicates=predicates,
                sort_by=sort_by,
                descending=descending,
                limit=limit,
                offset=offset,
            )
        known_total = self._counted_total(predicates)
        # A predicate on a stored field reads the record; others need the public row.
        keep = _matcher(predicates)
        items: list[dict[str, Any]] = []
        seen = 0
        for rec in self.newest_first():
            if predicates:
                if not keep(rec):
                    continue
            if seen >= offset:
                items.append(rec.public())
            seen += 1
            if len(items) >= limit and known_total is not None:
                break
        total = known_total if known_total is not None else seen
        return {"total": total, "offset": offset, "limit": limit, "items": items}

    def _counted_total(self, predicates: list[Predicate]) -> int | None:
        if not predicates:
            return len(self.tasks)
        if len(predicates) == 1 and not predicates[0].negate:
            p = predicates[0]
            if p.key in self.counts:
                counter = self.counts[p.key]
                return sum(n for k, n in counter.items() if (k or "") == p.value)
        return None

    def summary(self) -> list[dict[str, Any]]:
        """Per function: counts by state (the progress bars of the Tasks page)."""
        by_name: dict[str, dict[str, int]] = {}
        for (name, state), n in self.by_name_state.items():
            if n:
                by_name.setdefault(name, {})[state] = n
        rows = [
            {"name": name, "total": sum(states.values()), "states": states}
            for name, states in by_name.items()
        ]
        rows.sort(key=lambda r: (-r["total"], r["name"]))
        return rows


def _matcher(predicates: list[Predicate]) -> Any:
    """A test of one record: on its stored fields when it can (no row built per record)."""
    if all(p.key in _SLOTS for p in predicates):
        if len(predicates) == 1:
            p = predicates[0]
            get = attrgetter(p.key)
            return lambda rec: p.match(get(rec))
        return lambda rec: all(p.match(getattr(rec, p.key)) for p in predicates)
    return lambda rec: all(p(rec.public()) for p in predicates)


def _dec(counter: Counter, key: Any) -> None:
    n = counter.get(key, 0) - 1
    if n > 0:
        counter[key] = n
    else:
        counter.pop(key, None)
