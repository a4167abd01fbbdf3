"""The task table's filtered, sorted and counted reads (``TaskTable`` inherits them): a page
of rows that tests codes rather than building a row per task, totals from the per-value
counts, and the per-function summary. See ``ember.dashboard.task_table``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember.dashboard.query import Predicate, QueryError
from ember.dashboard.query import page as generic_page
from ember.dashboard.task_columns import FIELDS, STATES

if TYPE_CHECKING:
    from ember.dashboard.task_table import TaskTable


class TaskQueries:
    """Reads of ``TaskTable`` (a mixin: every method reads the table's own columns)."""

    def page(
        self: TaskTable,
        predicates: list[Predicate],
        limit: int,
        offset: int,
        sort_by: str | None,
        descending: bool,
    ) -> dict[str, Any]:
        """Newest first unless ``sort_by``; stops early when the total is known from counts."""
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
            if seen >= offset and len(items) < limit:
                items.append(self.row(slot))
            seen += 1
            if len(items) >= limit and known_total is not None:
                break
        total = known_total if known_total is not None else seen
        return {"total": total, "offset": offset, "limit": limit, "items": items}

    def _matcher(self: TaskTable, predicates: list[Predicate]) -> Callable[[int], bool] | None:
        """A test of one slot: on its codes when it can (each value tested once, not once
        per task; no row built per task)."""
        if not predicates:
            return None
        if all(p.key in self.codes for p in predicates):
            tests = [(self.codes[p.key], self.code_tables[p.key].matches(p)) for p in predicates]
            if len(tests) == 1:
                col, ok = tests[0]
                return lambda s: ok[col[s]]
            return lambda s: all(ok[col[s]] for col, ok in tests)
        if all(p.key in self.cols for p in predicates):
            return lambda s: all(p.match(self.cols[p.key][s]) for p in predicates)
        return lambda s: all(p(r) for r in (self.row(s),) for p in predicates)

    def _counted_total(self: TaskTable, predicates: list[Predicate]) -> int | None:
        if not predicates:
            return len(self)
        if len(predicates) == 1 and not predicates[0].negate:
            p = predicates[0]
            if p.key in self.code_tables:
                counter = self.counts[p.key]
                return sum(n for k, n in counter.items() if (k or "") == p.value)
        return None

    def summary(self: TaskTable, job_id: str | None = None) -> list[dict[str, Any]]:
        """Per function: counts by state (the progress bars of the Tasks page); of one job's
        tasks with ``job_id`` (one pass over two integer columns: its counts are not kept)."""
        pairs = self.by_name_state.items() if job_id is None else self._job_counts(job_id).items()
        by_name: dict[str, dict[str, int]] = {}
        for (name, state), n in pairs:
            if n:
                by_name.setdefault(name, {})[state] = n
        rows = [
            {"name": name, "total": sum(states.values()), "states": states}
            for name, states in by_name.items()
        ]
        rows.sort(key=lambda r: (-r["total"], r["name"]))
        return rows

    def _job_counts(self: TaskTable, job_id: str) -> Counter:
        """``{(name, state): n}`` of the kept tasks of ``job_id``."""
        job = self.code_tables["job_id"].code.get(job_id)
        if job is None:
            return Counter()
        jobs, names, states = self.codes["job_id"], self.codes["name"], self.codes["state"]
        codes: Counter = Counter()
        for s in range(len(self)):
            if jobs[s] == job:
                codes[(names[s], states[s])] += 1
        name_of = self.code_tables["name"].values
        return Counter({(name_of[n], STATES[st]): c for (n, st), c in codes.items()})
