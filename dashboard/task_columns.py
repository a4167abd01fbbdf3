"""The task table's compact columns: text values with few distinct values as counted codes
(``Codes``), and read-only views over the columns (ids, coded text, sparse errors) that give
rows their values without copying a column. See ``ember.dashboard.task_table``."""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ember.dashboard.query import Predicate
from ember.dashboard.schemas import TASK_STATES, TASKS

if TYPE_CHECKING:
    from ember.dashboard.task_table import TaskTable


# Ember's phases, in order, as the row schema declares them: a task's state code is its index.
STATES = TASK_STATES
TERMINAL = frozenset({"FINISHED", "FAILED"})
RANK = {s: i for i, s in enumerate(STATES)}
RETRYING_CODE = RANK["RETRYING"]
FIRST_TERMINAL = min(RANK[s] for s in TERMINAL)  # codes from here on are terminal
# Each state's place in one attempt's life, by code: as its code, but RETRYING (the state a
# retry's attempt starts in) comes before its push to a worker, not after RUNNING.
PHASE = [float(i) for i in range(len(STATES))]
PHASE[RETRYING_CODE] = RANK["PENDING_NODE_ASSIGNMENT"] + 0.5
# Fields a task list can filter and sort on (the public row's keys): its declaration's.
FIELDS = TASKS.filterable
# Coded text columns and the value a new task has (None: not known yet).
CODED = {
    "state": STATES[0],
    "name": "",
    "job_id": "",
    "node_id": None,
    "worker_id": None,
    "actor_id": None,
    "placement_group_id": None,
    "error_type": None,
}
TEXT = ("task_id", *CODED, "error")
TIMES = ("t_pending", "t_assign", "t_scheduled", "t_start", "t_args", "t_executed", "t_end")
UNKNOWN_TIME = math.nan  # a time not known yet
BLOCK = 1024  # insertions per block of the time index (and per chunk a scan copies)
ID_BYTES = 16  # a task id (ember.ids.TASK_ID_SIZE), stored raw
NO_ID = bytes(ID_BYTES)  # the id bytes of a slot whose id is kept in the odd-ids dict
EMPTY_ENTRY = -1  # a free entry of the id hash table


def task_type(name: str | None, actor_id: str | None) -> str:
    """Ray's task type: an actor's constructor is its creation task."""
    if not actor_id:
        return "NORMAL_TASK"
    return "ACTOR_CREATION_TASK" if (name or "").endswith(".__init__") else "ACTOR_TASK"


def time_or_none(v: float) -> float | None:
    return None if v != v else v  # NaN is the only value not equal to itself


def id_key(task_id: Any) -> bytes | None:
    """The 16 raw bytes of a canonical task id (32 lowercase hex digits), else None."""
    try:
        key = bytes.fromhex(task_id)
    except (ValueError, TypeError):
        return None
    if len(key) != ID_BYTES or not (task_id.islower() or task_id.isdigit()):
        return None  # shorter, longer, or with capitals: ``hex()`` would not give it back
    return key


class Codes:
    """One text column's values as small ints: ``values[code]`` is the value, ``refs[code]``
    how many kept tasks hold it. The first ``len(fixed)`` codes are permanent (the column's
    default, or every state); any other code is given back when no kept task holds its value
    and reused by the next new value, so the table stays as large as the values in use."""

    __slots__ = ("values", "refs", "code", "free", "fixed")

    def __init__(self, fixed: tuple[Any, ...]) -> None:
        self.values: list[Any] = list(fixed)
        self.refs: list[int] = [0] * len(fixed)
        self.code: dict[Any, int] = {v: i for i, v in enumerate(fixed)}
        self.free: list[int] = []
        self.fixed = len(fixed)

    def take(self, value: Any) -> int:
        """The code of ``value``, held once more."""
        c = self.code.get(value)
        if c is not None:
            self.refs[c] += 1
            return c
        if self.free:
            c = self.free.pop()
            self.values[c] = value
            self.refs[c] = 1
        else:
            c = len(self.values)
            self.values.append(value)
            self.refs.append(1)
        self.code[value] = c
        return c

    def release(self, c: int) -> None:
        n = self.refs[c] - 1
        self.refs[c] = n
        if n == 0 and c >= self.fixed:
            del self.code[self.values[c]]
            self.values[c] = None
            self.free.append(c)

    def counts(self) -> Counter:
        """{value: kept tasks holding it}, values held by none left out."""
        return Counter({v: n for v, n in zip(self.values, self.refs, strict=True) if n})

    def matches(self, p: Predicate) -> list[bool]:
        """Per code: does a task holding it pass ``p`` (a filter tests a code, not a text)."""
        return [p.match(v) for v in self.values]


class CodedColumn:
    """``cols[key][slot]``: a coded column read as text (the columns' public view)."""

    __slots__ = ("codes", "values")

    def __init__(self, codes: array, table: Codes) -> None:
        self.codes = codes
        self.values = table.values  # the code table's own list: it follows changes

    def __getitem__(self, slot: int) -> Any:
        return self.values[self.codes[slot]]


class IdColumn:
    __slots__ = ("table",)

    def __init__(self, table: TaskTable) -> None:
        self.table = table

    def __getitem__(self, slot: int) -> str:
        return self.table.task_id(slot)


class ErrorColumn:
    __slots__ = ("errors",)

    def __init__(self, errors: dict[int, str]) -> None:
        self.errors = errors

    def __getitem__(self, slot: int) -> str | None:
        return self.errors.get(slot)


class Counts(Mapping):
    """``counts[key]``: {value: kept tasks} of a coded column, read from its code table."""

    def __init__(self, codes: dict[str, Codes]) -> None:
        self._codes = codes

    def __getitem__(self, key: str) -> Counter:
        return self._codes[key].counts()

    def __iter__(self) -> Iterator[str]:
        return iter(self._codes)

    def __len__(self) -> int:
        return len(self._codes)
