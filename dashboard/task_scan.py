"""A bounded pass over the task table for the timeline: ``TaskRecord`` copies of the tasks in
a time window, a block at a time. See ``ember.dashboard.task_table``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from ember.dashboard.task_columns import BLOCK, RANK, STATES, time_or_none

if TYPE_CHECKING:
    from ember.dashboard.task_table import TaskTable


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
        self.now = table.clock()  # where a task still running ends in the trace
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
        codes, tables, times, cap = tb.codes, tb.code_tables, tb.times, tb.cap
        t_start, t_end = times["t_start"], times["t_end"]
        t_pending, t_scheduled = times["t_pending"], times["t_scheduled"]
        t_args, t_executed = times["t_args"], times["t_executed"]
        job_col, node_col = codes["job_id"], codes["node_id"]
        name_col, state_col = codes["name"], codes["state"]
        job_of, node_of = tables["job_id"].values, tables["node_id"].values
        name_of = tables["name"].values
        pid, attempt = tb.pid, tb.attempt
        job, node = self.job_id, self.node_id
        # The filters as codes, read now: codes may be reused between two blocks.
        job_ok = _prefix_matches(tables["job_id"].values, job) if job else None
        node_ok = _prefix_matches(tables["node_id"].values, node) if node else None
        running, failed, now = RANK["RUNNING"], RANK["FAILED"], self.now
        out: list[TaskRecord] = []
        for s in range(lo, hi):
            slot = s % cap
            start, end = t_start[slot], t_end[slot]
            if start != start:
                # An attempt killed with its worker before the worker reported it ran: drawn
                # from its push to the worker (else its submission) to its end.
                if state_col[slot] != failed or end != end or node_col[slot] == 0:
                    continue  # not run yet: nothing to draw
                start = (
                    t_scheduled[slot] if t_scheduled[slot] == t_scheduled[slot] else t_pending[slot]
                )
                if start != start:
                    continue
            if end != end:
                if state_col[slot] != running:
                    continue  # its end is not known (yet): nothing to draw
                end = max(now, start)  # still running: drawn up to now
            if since is not None and end < since:
                continue
            if until is not None and start > until:
                continue
            if job_ok is not None and not job_ok[job_col[slot]]:
                continue
            if node_ok is not None and not node_ok[node_col[slot]]:
                continue
            out.append(
                TaskRecord(
                    tb.task_id(slot),
                    name_of[name_col[slot]],
                    STATES[state_col[slot]],
                    job_of[job_col[slot]],
                    node_of[node_col[slot]],
                    pid[slot] or None,
                    attempt[slot],
                    time_or_none(t_pending[slot]),
                    time_or_none(t_scheduled[slot]),
                    start,
                    time_or_none(t_args[slot]),
                    time_or_none(t_executed[slot]),
                    end,
                )
            )
        return out


def _prefix_matches(values: list, prefix: str) -> list[bool]:
    """Per code: does the value start with ``prefix`` (ids are given as their first digits,
    as shown on screen)."""
    return [bool(v) and v.startswith(prefix) for v in values]
