"""The task table: one row per task, built from the owners' task events, stored by column.

Sized for a million tasks in a few hundred MB: a task is a slot in a ring of columns (one
list or typed array per field, so a time costs 8 bytes, not a 24-byte float object plus a
pointer), strings are interned (a million tasks share a few thousand names and ids), and the
table keeps per-state, per-function, per-node and per-job counts so a filtered page knows
its total without a scan. Past ``cap`` the oldest task's slot is reused and ``dropped``
counts it.

Slots are in insertion order (a task's first event), so a time window is found without a
scan: per block of ``BLOCK`` consecutive insertions the table keeps the latest end and the
earliest start of its tasks, and ``scan`` skips blocks wholly outside the window. A scan
copies one block at a time into ``TaskRecord`` tuples, so it holds a bounded amount whatever
the table's size, and it notices slots reused by ingestion between two blocks (it skips them
and counts them) instead of reading a newer task in an older one's place.

Rules:
- events may arrive out of order (owners flush independently): a terminal state
  (FINISHED, FAILED) is never overwritten by an earlier phase;
- a RETRYING event re-opens a task (its attempt grows).
"""

from __future__ import annotations

import math
import sys
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

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
_TEXT = ("task_id", "name", "state", "job_id", "actor_id", "node_id", "worker_id", "error")
_TIMES = ("t_pending", "t_scheduled", "t_start", "t_args", "t_executed", "t_end")
_NONE = math.nan  # a time not known yet
BLOCK = 1024  # insertions per block of the time index (and per chunk a scan copies)


def _t(v: float) -> float | None:
    return None if v != v else v  # NaN is the only value not equal to itself


class TaskRecord(NamedTuple):
    """A copy of one task's fields for the timeline (times are None when not known)."""

    task_id: str
    name: str
    state: str
    job_id: str
    node_id: str | None
    pid: int | None
    attempt: int
    t_pending: float | None
    t_scheduled: float | None
    t_start: float | None
    t_args: float | None
    t_executed: float | None
    t_end: float | None


class TaskView:
    """One task of the table, read through its slot (valid until the slot is reused)."""

    __slots__ = ("_table", "slot")

    def __init__(self, table: TaskTable, slot: int) -> None:
        self._table = table
        self.slot = slot

    def __getattr__(self, name: str) -> Any:
        return self._table.field(self.slot, name)

    def public(self) -> dict[str, Any]:
        return self._table.row(self.slot)

    def events(self) -> list[dict[str, Any]]:
        """The task's phases with their times (the detail view and the timeline)."""
        tb, s = self._table, self.slot
        state = tb.cols["state"][s]
        out = []
        for label, col in (
            ("PENDING_ARGS_AVAIL", "t_pending"),
            ("SUBMITTED_TO_WORKER", "t_scheduled"),
            ("RUNNING", "t_start"),
            ("ARGS_FETCHED", "t_args"),
            ("EXECUTED", "t_executed"),
            (state if state in TERMINAL else "END", "t_end"),
        ):
            t = _t(tb.times[col][s])
            if t is not None:
                out.append({"state": label, "time": t})
        return out


class TaskTable:
    def __init__(self, cap: int) -> None:
        self.cap = max(cap, 1)
        self.index: dict[str, int] = {}  # {task_id hex: slot}
        self.cols: dict[str, list[Any]] = {k: [] for k in _TEXT}
        self.times: dict[str, array] = {k: array("d") for k in _TIMES}
        self.pid = array("i")  # 0: not known
        self.attempt = array("i")
        self.seq = 0  # tasks ever inserted; the newest is in slot (seq - 1) % cap
        self.dropped = 0
        self.counts: dict[str, Counter] = {k: Counter() for k in _COUNTED}
        self.by_name_state: Counter = Counter()  # {(name, state): n} for the summary
        # The time index: per block of BLOCK insertions (block = seq // BLOCK, stored at
        # block % n), the latest end and the earliest start of its tasks. The kept tasks span
        # at most cap // BLOCK + 1 blocks, so the ring never reuses a kept block's entry.
        self._blocks = self.cap // BLOCK + 2
        self._blk_end = array("d", [-math.inf]) * self._blocks
        self._blk_start = array("d", [math.inf]) * self._blocks

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, task_id: str) -> bool:
        return task_id in self.index

    def get(self, task_id: str) -> TaskView | None:
        slot = self.index.get(task_id)
        return None if slot is None else TaskView(self, slot)

    def field(self, slot: int, name: str) -> Any:
        if name in self.cols:
            return self.cols[name][slot]
        if name in self.times:
            return _t(self.times[name][slot])
        if name == "pid":
            return self.pid[slot] or None
        if name == "attempt":
            return self.attempt[slot]
        raise AttributeError(name)

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
    ) -> int:
        """Applies one event and returns the task's slot; ``node_id`` is where the task ran,
        when the caller knows it."""
        slot = self.index.get(task_id)
        if slot is None:
            slot = self._insert(task_id, job_id)
        cols, times = self.cols, self.times
        old = (cols["state"][slot], cols["name"][slot], cols["node_id"][slot])
        tm = None
        if extra:
            name = extra.get("name") or extra.get("function")
            if name and not cols["name"][slot]:
                cols["name"][slot] = sys.intern(name)
            # Interned: a million tasks share a few thousand worker and actor ids.
            if extra.get("actor_id"):
                cols["actor_id"][slot] = sys.intern(extra["actor_id"])
            if extra.get("worker_id"):
                cols["worker_id"][slot] = sys.intern(extra["worker_id"])
            pid = extra.get("pid")
            if pid and isinstance(pid, int) and 0 < pid < 2**31:
                self.pid[slot] = pid
            if extra.get("node_id"):
                node_id = node_id or extra["node_id"]
            if extra.get("error"):
                cols["error"][slot] = str(extra["error"])[:4000]
            tm = extra.get("timings")
            if tm:
                for col, key in (
                    ("t_start", "start"),
                    ("t_args", "args_ready"),
                    ("t_executed", "executed"),
                    ("t_end", "end"),
                ):
                    v = tm.get(key)
                    if isinstance(v, int | float):
                        times[col][slot] = v
        cur = cols["state"][slot]
        cur_attempt = self.attempt[slot]
        if state == "RETRYING":
            self.attempt[slot] = max(cur_attempt, attempt)
            cols["state"][slot] = "RETRYING"
        elif state in _RANK:
            newer = attempt > cur_attempt
            if (cur not in TERMINAL or newer) and (_RANK[state] >= _RANK.get(cur, 0) or newer):
                cols["state"][slot] = STATES[_RANK[state]]
                self.attempt[slot] = max(cur_attempt, attempt)
        if state == "PENDING_ARGS_AVAIL" and times["t_pending"][slot] != times["t_pending"][slot]:
            times["t_pending"][slot] = t
        elif state == "SUBMITTED_TO_WORKER":
            times["t_scheduled"][slot] = t
        elif state in TERMINAL and times["t_end"][slot] != times["t_end"][slot]:
            times["t_end"][slot] = t
        if tm or state in TERMINAL:
            self._index_times(slot)
        if node_id and cols["node_id"][slot] is None:
            cols["node_id"][slot] = sys.intern(node_id)
        self._recount(slot, old)
        return slot

    def _index_times(self, slot: int) -> None:
        """Widens the time index's block of ``slot`` to cover its task's start and end."""
        seq = slot + self.cap * ((self.seq - 1 - slot) // self.cap)  # the slot's insertion
        b = (seq // BLOCK) % self._blocks
        start, end = self.times["t_start"][slot], self.times["t_end"][slot]
        if end > self._blk_end[b]:  # NaN (not known) compares false: left out
            self._blk_end[b] = end
        if start < self._blk_start[b]:
            self._blk_start[b] = start

    def _insert(self, task_id: str, job_id: str) -> int:
        job = sys.intern(job_id) if job_id else ""
        if self.seq % BLOCK == 0:  # a new block of the time index starts empty
            b = (self.seq // BLOCK) % self._blocks
            self._blk_end[b] = -math.inf
            self._blk_start[b] = math.inf
        if len(self.index) < self.cap and self.seq < self.cap:
            slot = self.seq
            for k in _TEXT:
                self.cols[k].append(None)
            for k in _TIMES:
                self.times[k].append(_NONE)
            self.pid.append(0)
            self.attempt.append(0)
        else:
            slot = self.seq % self.cap
            self._evict(slot)
            for k in _TEXT:
                self.cols[k][slot] = None
            for k in _TIMES:
                self.times[k][slot] = _NONE
            self.pid[slot] = 0
            self.attempt[slot] = 0
        self.seq += 1
        cols = self.cols
        cols["task_id"][slot] = task_id
        cols["name"][slot] = ""
        cols["state"][slot] = STATES[0]
        cols["job_id"][slot] = job
        self.index[task_id] = slot
        self.counts["state"][STATES[0]] += 1
        self.counts["name"][""] += 1
        self.counts["node_id"][None] += 1
        self.counts["job_id"][job] += 1
        self.by_name_state[("", STATES[0])] += 1
        return slot

    def _evict(self, slot: int) -> None:
        cols = self.cols
        task_id = cols["task_id"][slot]
        if task_id is None or self.index.get(task_id) != slot:
            return
        del self.index[task_id]
        for key in _COUNTED:
            _dec(self.counts[key], cols[key][slot])
        _dec(self.by_name_state, (cols["name"][slot], cols["state"][slot]))
        self.dropped += 1

    def _recount(self, slot: int, old: tuple) -> None:
        cols = self.cols
        state, name, node = old
        new = (cols["state"][slot], cols["name"][slot], cols["node_id"][slot])
        if old == new:
            return
        for key, before, after in zip(("state", "name", "node_id"), old, new, strict=True):
            if before != after:
                _dec(self.counts[key], before)
                self.counts[key][after] += 1
        if (name, state) != (new[1], new[0]):
            _dec(self.by_name_state, (name, state))
            self.by_name_state[(new[1], new[0])] += 1

    # -- queries ---------------------------------------------------------------------------
    def newest_slots(self) -> Iterator[int]:
        """Slots of the kept tasks, newest first."""
        n = len(self.index)
        cap = self.cap
        for seq in range(self.seq - 1, self.seq - 1 - n, -1):
            yield seq % cap

    def newest_first(self) -> Iterator[TaskView]:
        return (TaskView(self, s) for s in self.newest_slots())

    def scan(
        self,
        since: float | None = None,
        until: float | None = None,
        job_id: str | None = None,
        node_id: str | None = None,
    ) -> TaskScan:
        """The kept tasks oldest first (see ``TaskScan``), those that ran in the window."""
        return TaskScan(self, since, until, job_id, node_id)

    def row(self, slot: int) -> dict[str, Any]:
        cols, times = self.cols, self.times
        start, end = _t(times["t_start"][slot]), _t(times["t_end"][slot])
        actor = cols["actor_id"][slot]
        return {
            "task_id": cols["task_id"][slot],
            "name": cols["name"][slot],
            "state": cols["state"][slot],
            "job_id": cols["job_id"][slot],
            "actor_id": actor,
            "node_id": cols["node_id"][slot],
            "worker_id": cols["worker_id"][slot],
            "pid": self.pid[slot] or None,
            "attempt": self.attempt[slot],
            "type": "ACTOR_TASK" if actor else "NORMAL_TASK",
            "submitted_time": _t(times["t_pending"][slot]),
            "start_time": start,
            "end_time": end,
            "duration_s": (end - start) if start is not None and end is not None else None,
            "error": cols["error"][slot],
        }

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
                (self.row(s) for s in self.newest_slots()),
                predicates=predicates,
                sort_by=sort_by,
                descending=descending,
                limit=limit,
                offset=offset,
            )
        known_total = self._counted_total(predicates)
        keep = self._matcher(predicates)
        items: list[dict[str, Any]] = []
        seen = 0
        for slot in self.newest_slots():
            if keep is not None and not keep(slot):
                continue
            if seen >= offset:
                items.append(self.row(slot))
            seen += 1
            if len(items) >= limit and known_total is not None:
                break
        total = known_total if known_total is not None else seen
        return {"total": total, "offset": offset, "limit": limit, "items": items}

    def _matcher(self, predicates: list[Predicate]) -> Callable[[int], bool] | None:
        """A test of one slot: on its stored column when it can (no row built per task)."""
        if not predicates:
            return None
        if all(p.key in self.cols for p in predicates):
            if len(predicates) == 1:
                p = predicates[0]
                col = self.cols[p.key]
                return lambda s: p.match(col[s])
            return lambda s: all(p.match(self.cols[p.key][s]) for p in predicates)
        return lambda s: all(p(r) for r in (self.row(s),) for p in predicates)

    def _counted_total(self, predicates: list[Predicate]) -> int | None:
        if not predicates:
            return len(self.index)
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


class TaskScan:
    """One pass over the tasks kept when it starts, oldest first (insertion order), as
    ``TaskRecord`` copies of the tasks that ran (start and end known) in the window: ending
    at or after ``since``, starting at or before ``until``, of the job and node if given.

    Costs the blocks of the time index plus the tasks of the blocks that overlap the window,
    not the table. Holds at most one block of copies: the table may change between two blocks
    (the dashboard ingests between two chunks of a streamed response); slots reused since the
    scan started are skipped and counted in ``overwritten``, and tasks added since are left
    out. ``evicted`` is how many older tasks the table had dropped past its cap by the end."""

    def __init__(
        self,
        table: TaskTable,
        since: float | None,
        until: float | None,
        job_id: str | None,
        node_id: str | None,
    ) -> None:
        self.table = table
        self.since, self.until = since, until
        self.job_id, self.node_id = job_id, node_id
        self.end_seq = table.seq  # tasks inserted after this are not part of the scan
        self.first_seq = max(0, table.seq - table.cap)
        self.overwritten = 0
        self.blocks_read = 0

    @property
    def evicted(self) -> int:
        return self.table.dropped

    def __iter__(self) -> Iterator[TaskRecord]:
        seq = self.first_seq
        while seq < self.end_seq:
            hi = min((seq // BLOCK + 1) * BLOCK, self.end_seq)
            chunk, seq = self._copy(seq, hi), hi
            yield from chunk  # the table may change while these are consumed: copies

    def _copy(self, lo: int, hi: int) -> list[TaskRecord]:
        tb = self.table
        oldest = tb.seq - tb.cap  # insertions before this have had their slot reused
        if lo < oldest:
            self.overwritten += min(hi, oldest) - lo
            lo = oldest
        if lo >= hi:
            return []
        b = (lo // BLOCK) % tb._blocks
        since, until = self.since, self.until
        if since is not None and tb._blk_end[b] < since:
            return []
        if until is not None and tb._blk_start[b] > until:
            return []
        self.blocks_read += 1
        cols, times, cap = tb.cols, tb.times, tb.cap
        t_start, t_end = times["t_start"], times["t_end"]
        job_col, node_col = cols["job_id"], cols["node_id"]
        job, node = self.job_id, self.node_id
        out: list[TaskRecord] = []
        for s in range(lo, hi):
            slot = s % cap
            start, end = t_start[slot], t_end[slot]
            if start != start or end != end:
                continue  # not run yet, or still running: nothing to draw
            if since is not None and end < since:
                continue
            if until is not None and start > until:
                continue
            if job and (job_col[slot] or "") != job:
                continue
            if node and (node_col[slot] or "") != node:
                continue
            out.append(
                TaskRecord(
                    cols["task_id"][slot],
                    cols["name"][slot],
                    cols["state"][slot],
                    job_col[slot],
                    node_col[slot],
                    tb.pid[slot] or None,
                    tb.attempt[slot],
                    _t(times["t_pending"][slot]),
                    _t(times["t_scheduled"][slot]),
                    start,
                    _t(times["t_args"][slot]),
                    _t(times["t_executed"][slot]),
                    end,
                )
            )
        return out


def _dec(counter: Counter, key: Any) -> None:
    n = counter.get(key, 0) - 1
    if n > 0:
        counter[key] = n
    else:
        counter.pop(key, None)
