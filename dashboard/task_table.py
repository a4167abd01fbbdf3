"""The task table: one row per task, built from the owners' task events, stored by column
(the columns and their codes: ``task_columns``; the timeline's bounded scan: ``task_scan``).

Sized for a million tasks in about 100 MB (~100 bytes a task): a task is a slot in a ring of
typed arrays, one per field, so no field costs a Python object per task:

- the task id is its 16 raw bytes in one ``bytearray`` (an id hex string costs ~90 bytes
  as a ``str`` and ~70 more as a dict key with its slot), found through an open-addressing
  hash table of slot numbers (``array('i')``, at most half full, linear probing); an id
  that is not 32 lowercase hex digits (tests, hand-made events) is kept in a small dict;
- text fields with few distinct values (state, function name, job, node, worker, actor) are
  4-byte codes into a per-column code table (``Codes``) that counts the kept tasks holding
  each value: a value no kept task holds gives its code back, so a long-running cluster's
  churn of worker ids costs what the kept tasks use, not every id ever seen. Those counts are
  also the per-state, per-function, per-node, per-job... totals a filtered page needs;
- an error is rare: a dict {slot: text};
- a time is 8 bytes in an ``array('d')`` (NaN: not known yet).

Past ``cap`` the oldest task's slot is reused and ``dropped`` counts it.

Slots are in insertion order (a task's first event), so a time window is found without a
scan: per block of ``BLOCK`` consecutive insertions the table keeps the latest end and the
earliest start of its tasks, and ``scan`` skips blocks wholly outside the window. A scan
copies one block at a time into ``TaskRecord`` tuples, so it holds a bounded amount whatever
the table's size, and it notices slots reused by ingestion between two blocks (it skips them
and counts them) instead of reading a newer task in an older one's place.

Rules:
- events may arrive out of order (owners flush independently): a terminal state
  (FINISHED, FAILED) is never overwritten by an earlier phase;
- a RETRYING event re-opens a task (its attempt grows); the retry's own events then move it
  on (PENDING_NODE_ASSIGNMENT, RUNNING, ...), so a running retry counts as running.
"""

from __future__ import annotations

import math
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any

from ember.dashboard.query import Predicate, QueryError
from ember.dashboard.query import page as generic_page
from ember.dashboard.task_columns import (
    BLOCK,
    CODED,
    EMPTY_ENTRY,
    FIELDS,
    FIRST_TERMINAL,
    ID_BYTES,
    NO_ID,
    RANK,
    RETRYING_CODE,
    STATES,
    TERMINAL,
    TIMES,
    UNKNOWN_TIME,
    CodedColumn,
    Codes,
    Counts,
    ErrorColumn,
    IdColumn,
    id_key,
    task_type,
    time_or_none,
)
from ember.dashboard.task_scan import TaskScan

EVICTED_MEMORY = 65_536  # evicted task ids remembered, to drop their late events
# Ways an attempt ends with its worker: no reply says where its lines end (they end where
# the worker's file does).
DIED = frozenset({"WORKER_DIED", "NODE_DIED", "ACTOR_DIED", "OUT_OF_MEMORY"})


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
        state = STATES[tb.codes["state"][s]]
        out = []
        for label, col in (
            ("PENDING_ARGS_AVAIL", "t_pending"),
            ("PENDING_NODE_ASSIGNMENT", "t_assign"),
            ("SUBMITTED_TO_WORKER", "t_scheduled"),
            ("RUNNING", "t_start"),
            ("ARGS_FETCHED", "t_args"),
            ("EXECUTED", "t_executed"),
            (state if state in TERMINAL else "END", "t_end"),
        ):
            t = time_or_none(tb.times[col][s])
            if t is not None:
                out.append({"state": label, "time": t})
        return out


class TaskTable:
    def __init__(self, cap: int) -> None:
        self.cap = max(cap, 1)
        self.clock: Callable[[], float] = time.time  # the state's (``DashboardState.set_clock``)
        self.seq = 0  # tasks ever inserted; the newest is in slot (seq - 1) % cap
        self.dropped = 0
        # Ids of the latest evicted tasks (a bounded window) and late events dropped for them.
        self._evicted: deque = deque(maxlen=min(self.cap, EVICTED_MEMORY))
        self._evicted_set: set = set()
        self.late_dropped = 0
        # Task ids: raw bytes per slot, and the hash table {hash(bytes) -> slot} (at most half
        # full: the probes stay short). Ids that are not 32 lowercase hex digits: the dicts.
        self._ids = bytearray()
        size = 1 << max(4, (2 * self.cap - 1).bit_length())
        self._mask = size - 1
        self._hashed = array("i", [EMPTY_ENTRY]) * size
        self._odd: dict[Any, int] = {}  # {odd task id: slot}
        self._odd_at: dict[int, Any] = {}  # {slot: odd task id}
        self._miss: tuple[bytes | None, int] = (None, EMPTY_ENTRY)  # set by a ``_find`` that missed
        # Coded text columns: {key: codes per slot} and their code tables.
        self.code_tables: dict[str, Codes] = {
            k: Codes(STATES if k == "state" else (default,)) for k, default in CODED.items()
        }
        self.codes: dict[str, array] = {k: array("B" if k == "state" else "I") for k in CODED}
        self.errors: dict[int, str] = {}  # {slot: error text}: most tasks have none
        # {slot: (attempt, out_start, out_end, err_start, err_end)}: the bytes of its worker's
        # log files the task wrote; only tasks that printed something have one.
        self.logs: dict[int, tuple[int, ...]] = {}
        self.times: dict[str, array] = {k: array("d") for k in TIMES}
        self.pid = array("i")  # 0: not known
        self.attempt = array("i")
        self.by_name_state: Counter = Counter()  # {(name, state): n} for the summary
        # Moves into FINISHED or FAILED, ever: counts that eviction never lowers (/metrics'
        # counters; the kept tasks' counts above fall as the ring drops old tasks).
        self.ended: dict[str, int] = dict.fromkeys(TERMINAL, 0)
        # Read-only views by field name, as text (what the table's users index by slot).
        self.cols: dict[str, Any] = {
            k: CodedColumn(self.codes[k], self.code_tables[k]) for k in CODED
        }
        self.cols["task_id"] = IdColumn(self)
        self.cols["error"] = ErrorColumn(self.errors)
        self.counts = Counts(self.code_tables)  # per coded column: {value: kept tasks}
        # The time index: per block of BLOCK insertions (block = seq // BLOCK, stored at
        # block % n), the latest end and the earliest start of its tasks. The kept tasks span
        # at most cap // BLOCK + 1 blocks, so the ring never reuses a kept block's entry.
        self._blocks = self.cap // BLOCK + 2
        self._blk_end = array("d", [-math.inf]) * self._blocks
        self._blk_start = array("d", [math.inf]) * self._blocks

    def __len__(self) -> int:
        return min(self.seq, self.cap)

    def __contains__(self, task_id: str) -> bool:
        return self._find(task_id) >= 0

    def get(self, task_id: str) -> TaskView | None:
        slot = self._find(task_id)
        return None if slot < 0 else TaskView(self, slot)

    def task_id(self, slot: int) -> str:
        if self._odd_at:
            odd = self._odd_at.get(slot)
            if odd is not None:
                return odd
        o = slot * ID_BYTES
        return self._ids[o : o + ID_BYTES].hex()

    def field(self, slot: int, name: str) -> Any:
        if name in self.codes:
            return self.code_tables[name].values[self.codes[name][slot]]
        if name in self.times:
            return time_or_none(self.times[name][slot])
        if name == "task_id":
            return self.task_id(slot)
        if name == "error":
            return self.errors.get(slot)
        if name == "pid":
            return self.pid[slot] or None
        if name == "attempt":
            return self.attempt[slot]
        raise AttributeError(name)

    # -- the id index ----------------------------------------------------------------------
    def _find(self, task_id: Any) -> int:
        """The slot of ``task_id``, or -1; on a miss, ``_miss`` is (key, free entry)."""
        key = id_key(task_id)
        if key is None:
            self._miss = (None, EMPTY_ENTRY)
            return self._odd.get(task_id, -1)
        mask, hashed, ids = self._mask, self._hashed, self._ids
        i = hash(key) & mask
        while True:
            s = hashed[i]
            if s == EMPTY_ENTRY:
                self._miss = (key, i)
                return -1
            o = s * ID_BYTES
            if ids[o : o + ID_BYTES] == key:
                return s
            i = (i + 1) & mask

    def _unhash(self, slot: int) -> None:
        """Takes ``slot``'s id out of the hash table, shifting back the entries after it
        (linear probing's deletion without tombstones: lookups stay as short as inserts)."""
        odd = self._odd_at.pop(slot, None) if self._odd_at else None
        if odd is not None:
            del self._odd[odd]
            return
        mask, hashed, ids = self._mask, self._hashed, self._ids
        o = slot * ID_BYTES
        i = hash(bytes(ids[o : o + ID_BYTES])) & mask
        while hashed[i] != slot:
            i = (i + 1) & mask
        j = i
        while True:
            j = (j + 1) & mask
            s = hashed[j]
            if s == EMPTY_ENTRY:
                break
            o = s * ID_BYTES
            home = hash(bytes(ids[o : o + ID_BYTES])) & mask
            # s stays unless the hole is on its probe path: its home cyclically in (i, j].
            if (i < home <= j) if i < j else (home > i or home <= j):
                continue
            hashed[i] = s
            i = j
        hashed[i] = EMPTY_ENTRY

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
        """Applies one event and returns the task's slot, or -1 for a late event of a task
        evicted past the cap (counted in ``late_dropped``); ``node_id`` is where the task
        ran, when the caller knows it."""
        slot = self._find(task_id)
        if slot < 0:
            if self._evicted and self._recently_evicted(task_id):
                self.late_dropped += 1
                return -1
            slot = self._insert(task_id, job_id)
        codes, times = self.codes, self.times
        states, names = codes["state"], codes["name"]
        old_state, old_name = states[slot], names[slot]
        tm = None
        if extra:
            name = extra.get("name") or extra.get("function")
            if name and not old_name:  # code 0: no name yet
                self._put("name", slot, name)
            if extra.get("actor_id"):
                self._put("actor_id", slot, extra["actor_id"])
            if extra.get("worker_id"):
                self._put("worker_id", slot, extra["worker_id"])
            pid = extra.get("pid")
            if pid and isinstance(pid, int) and 0 < pid < 2**31:
                self.pid[slot] = pid
            if extra.get("node_id"):
                node_id = node_id or extra["node_id"]
            error = extra.get("error")
            if error and (
                attempt > self.attempt[slot] or len(error) > len(self.errors.get(slot) or "")
            ):
                # Two accounts of one failure may come in either order (the worker's, with
                # the traceback, and the owner's "died before it ran"): the fuller one is
                # kept, whatever the order; a later attempt's replaces an earlier one's.
                self.errors[slot] = str(error)[:4000]
                if extra.get("error_type"):
                    self._put("error_type", slot, extra["error_type"])
            log = extra.get("log")
            if log and len(log) == 4 and attempt >= self.attempt[slot]:
                self.logs[slot] = (attempt, *(int(x) for x in log))
            elif extra.get("log_at") and state == "RUNNING":
                self._log_start(slot, attempt, extra["log_at"])
            elif state in TERMINAL and self.logs and extra.get("error_type") not in DIED:
                old_log = self.logs.get(slot)
                if old_log is not None and old_log[0] == attempt and old_log[2] < 0:
                    del self.logs[slot]  # ended without printing: no range to keep
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
        cur = old_state
        cur_attempt = self.attempt[slot]
        if state == "RETRYING":
            self.attempt[slot] = max(cur_attempt, attempt)
            cur = RETRYING_CODE
        else:
            rank = RANK.get(state)
            if rank is not None:
                # A retry's own phases move its task on from RETRYING (ranked above RUNNING,
                # it would otherwise hide the retry running as "pending").
                newer = attempt > cur_attempt or (cur == RETRYING_CODE and attempt == cur_attempt)
                if (cur < FIRST_TERMINAL or newer) and (rank >= cur or newer):
                    cur = rank
                    self.attempt[slot] = max(cur_attempt, attempt)
        if state == "PENDING_ARGS_AVAIL" and times["t_pending"][slot] != times["t_pending"][slot]:
            times["t_pending"][slot] = t
        elif (
            state == "PENDING_NODE_ASSIGNMENT"
            and times["t_assign"][slot] != times["t_assign"][slot]
        ):
            times["t_assign"][slot] = t
        elif state == "SUBMITTED_TO_WORKER":
            times["t_scheduled"][slot] = t
        elif state == "RUNNING" and times["t_start"][slot] != times["t_start"][slot]:
            times["t_start"][slot] = t
        elif state in TERMINAL and times["t_end"][slot] != times["t_end"][slot]:
            times["t_end"][slot] = t
        if tm or state in TERMINAL or state == "RUNNING":
            self._index_times(slot)
        if node_id and not codes["node_id"][slot]:  # code 0: not known yet
            self._put("node_id", slot, node_id)
        if cur != old_state:
            states[slot] = cur
            refs = self.code_tables["state"].refs
            refs[old_state] -= 1
            refs[cur] += 1
            if cur >= FIRST_TERMINAL:
                self.ended[STATES[cur]] += 1
        if cur != old_state or names[slot] != old_name:
            name_of = self.code_tables["name"].values
            _dec(self.by_name_state, (name_of[old_name], STATES[old_state]))
            self.by_name_state[(name_of[names[slot]], STATES[cur])] += 1
        return slot

    def _log_start(self, slot: int, attempt: int, log_at: Any) -> None:
        """A running attempt's start offsets, its end not known yet (-1): kept unless the
        end's event came first (events arrive in any order) or the task already ended."""
        old = self.logs.get(slot)
        if old is not None and old[0] >= attempt:
            return
        if self.codes["state"][slot] >= FIRST_TERMINAL and attempt <= self.attempt[slot]:
            return
        if len(log_at) == 2:
            self.logs[slot] = (attempt, int(log_at[0]), -1, int(log_at[1]), -1)

    def fail_open_tasks(self, job_id: str, t: float, error: str, error_type: str) -> int:
        """Ends every kept task of ``job_id`` not in a final state as FAILED (its driver is
        gone: nothing will report it again); returns how many."""
        job = self.code_tables["job_id"].code.get(job_id)
        if job is None:
            return 0
        jobs, states = self.codes["job_id"], self.codes["state"]
        open_slots = [s for s in range(len(self)) if jobs[s] == job and states[s] < FIRST_TERMINAL]
        extra = {"error": error, "error_type": error_type}
        for s in open_slots:
            self.apply(self.task_id(s), "FAILED", t, self.attempt[s], extra)
        return len(open_slots)

    def _put(self, key: str, slot: int, value: Any) -> None:
        """Sets a coded column's value for ``slot`` (the old value's code is let go)."""
        table, col = self.code_tables[key], self.codes[key]
        old = col[slot]
        col[slot] = table.take(value)  # taken before the release: a same value stays coded
        table.release(old)

    def _index_times(self, slot: int) -> None:
        """Widens the time index's block of ``slot`` to cover its task's start and end."""
        seq = slot + self.cap * ((self.seq - 1 - slot) // self.cap)  # the slot's insertion
        b = (seq // BLOCK) % self._blocks
        start, end = self.times["t_start"][slot], self.times["t_end"][slot]
        if end != end and start == start:
            end = math.inf  # running: drawn up to any later time
        if end > self._blk_end[b]:  # NaN (not known) compares false: left out
            self._blk_end[b] = end
        if start < self._blk_start[b]:
            self._blk_start[b] = start

    def _insert(self, task_id: Any, job_id: str) -> int:
        key, entry = self._miss  # what the ``_find`` that missed saw
        if self.seq % BLOCK == 0:  # a new block of the time index starts empty
            b = (self.seq // BLOCK) % self._blocks
            self._blk_end[b] = -math.inf
            self._blk_start[b] = math.inf
        tables, codes = self.code_tables, self.codes
        job = tables["job_id"].take(job_id)  # before the eviction: a same job stays coded
        if self.seq < self.cap:
            slot = self.seq
            for k, col in codes.items():
                col.append(job if k == "job_id" else 0)
            for col in self.times.values():
                col.append(UNKNOWN_TIME)
            self.pid.append(0)
            self.attempt.append(0)
            self._ids += key or NO_ID
        else:
            slot = self.seq % self.cap
            self._evict(slot)
            for k, col in codes.items():
                col[slot] = job if k == "job_id" else 0
            for col in self.times.values():
                col[slot] = UNKNOWN_TIME
            self.pid[slot] = 0
            self.attempt[slot] = 0
            o = slot * ID_BYTES
            self._ids[o : o + ID_BYTES] = key or NO_ID
            if key is not None:  # the eviction may have moved entries: probe again
                entry = hash(key) & self._mask
                while self._hashed[entry] != EMPTY_ENTRY:
                    entry = (entry + 1) & self._mask
        self.seq += 1
        if key is None:
            self._odd[task_id] = slot
            self._odd_at[slot] = task_id
        else:
            self._hashed[entry] = slot
        for k, table in tables.items():
            if k != "job_id":
                table.refs[0] += 1  # the defaults: first state, no name, node...
        self.by_name_state[("", STATES[0])] += 1
        return slot

    def _recently_evicted(self, task_id: Any) -> bool:
        key = self._miss[0]  # what the ``_find`` that missed saw
        return (key if key is not None else task_id) in self._evicted_set

    def _evict(self, slot: int) -> None:
        # Remembered for a while: a late event of this task (the worker's RUNNING, sent on
        # its own schedule) must not bring it back as a task that never ends.
        odd = self._odd_at.get(slot) if self._odd_at else None
        o = slot * ID_BYTES
        key = odd if odd is not None else bytes(self._ids[o : o + ID_BYTES])
        if len(self._evicted) == self._evicted.maxlen:
            self._evicted_set.discard(self._evicted[0])
        self._evicted.append(key)
        self._evicted_set.add(key)
        self._unhash(slot)
        name = self.code_tables["name"].values[self.codes["name"][slot]]  # before its release
        _dec(self.by_name_state, (name, STATES[self.codes["state"][slot]]))
        for k, table in self.code_tables.items():
            table.release(self.codes[k][slot])
        if self.errors:
            self.errors.pop(slot, None)
        if self.logs:
            self.logs.pop(slot, None)
        self.dropped += 1

    # -- queries ---------------------------------------------------------------------------
    def newest_slots(self) -> Iterator[int]:
        """Slots of the kept tasks, newest first."""
        n = len(self)
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
        codes, tables, times = self.codes, self.code_tables, self.times
        start, end = time_or_none(times["t_start"][slot]), time_or_none(times["t_end"][slot])
        actor = tables["actor_id"].values[codes["actor_id"][slot]]
        name = tables["name"].values[codes["name"][slot]]
        return {
            "task_id": self.task_id(slot),
            "name": name,
            "state": STATES[codes["state"][slot]],
            "job_id": tables["job_id"].values[codes["job_id"][slot]],
            "actor_id": actor,
            "node_id": tables["node_id"].values[codes["node_id"][slot]],
            "worker_id": tables["worker_id"].values[codes["worker_id"][slot]],
            "pid": self.pid[slot] or None,
            "attempt": self.attempt[slot],
            "type": task_type(name, actor),
            "submitted_time": time_or_none(times["t_pending"][slot]),
            "start_time": start,
            "end_time": end,
            "duration_s": (end - start) if start is not None and end is not None else None,
            "error_type": tables["error_type"].values[codes["error_type"][slot]],
            "error": self.errors.get(slot),
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

    def _matcher(self, predicates: list[Predicate]) -> Callable[[int], bool] | None:
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

    def _counted_total(self, predicates: list[Predicate]) -> int | None:
        if not predicates:
            return len(self)
        if len(predicates) == 1 and not predicates[0].negate:
            p = predicates[0]
            if p.key in self.code_tables:
                counter = self.counts[p.key]
                return sum(n for k, n in counter.items() if (k or "") == p.value)
        return None

    def summary(self, job_id: str | None = None) -> list[dict[str, Any]]:
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

    def _job_counts(self, job_id: str) -> Counter:
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


def _dec(counter: Counter, key: Any) -> None:
    n = counter.get(key, 0) - 1
    if n > 0:
        counter[key] = n
    else:
        counter.pop(key, None)
