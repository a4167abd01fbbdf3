"""The task table: one row per task attempt, built from the task events, stored by column
(the columns and their codes: ``task_columns``; the timeline's bounded scan: ``task_scan``;
pages, totals and the summary: ``task_queries``).

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

A row is a task's attempt, keyed by (task id, attempt number) as Ray's state API: a retry
(``max_retries``, ``retry_exceptions``, a worker's or node's death, the memory monitor, an
actor call resent to a restarted actor, lineage reconstruction) is a row of its own, with the
node, worker and pid where that attempt ran; the attempt before it ends FAILED there. The id
index hashes the id and the attempt (the slot's ``attempt`` never changes); ``get(task_id)``
finds the newest attempt through ``_retried`` ({id key: highest attempt}, only for tasks
retried at least once: most tasks never are).

Rules:
- events may arrive out of order (processes flush independently): a terminal state
  (FINISHED, FAILED) is never overwritten by an earlier phase, and only a FAILED presumed at
  its job's end (nothing had reported the end within the grace) yields, to the attempt's
  reported end arriving later;
- where an attempt ran is what its events that know say (the executing worker's RUNNING, the
  owner's push to a leased worker): those override a guess made from an earlier event;
- a new attempt copies its task's name, job and actor from the attempt before it, and ends
  that one FAILED if nothing had ended it (its owner's account of the failure was lost).
"""

from __future__ import annotations

import math
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any

from ember.dashboard.task_columns import (
    BLOCK,
    CODED,
    EMPTY_ENTRY,
    FIRST_TERMINAL,
    ID_BYTES,
    NO_ID,
    PHASE,
    RANK,
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
from ember.dashboard.task_queries import TaskQueries
from ember.dashboard.task_scan import TaskScan

EVICTED_MEMORY = 65_536  # evicted task ids remembered, to drop their late events
# A task detail's attempt list: these fields of each attempt's row.
ATTEMPT_FIELDS = (
    "attempt",
    "state",
    "node_id",
    "worker_id",
    "pid",
    "start_time",
    "end_time",
    "error_type",
)
# Ways an attempt ends with its worker: no reply says where its lines end (they end where
# the worker's file does).
DIED = frozenset({"WORKER_DIED", "NODE_DIED", "ACTOR_DIED", "OUT_OF_MEMORY"})
# The columns of the phases an agent may fold into an attempt's end event.
FOLDED_TIMES = ("t_pending", "t_assign", "t_scheduled")


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
            ("PENDING_ARGS_AVAIL" if tb.attempt[s] == 0 else "RETRYING", "t_pending"),
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


class TaskTable(TaskQueries):
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
        self._odd: dict[tuple[Any, int], int] = {}  # {(odd task id, attempt): slot}
        self._odd_at: dict[int, Any] = {}  # {slot: odd task id}
        self._miss: tuple[bytes | None, int] = (None, EMPTY_ENTRY)  # set by a ``_find`` that missed
        # {id key (raw bytes, or the odd id): its highest kept attempt}, for retried tasks only.
        self._retried: dict[Any, int] = {}
        # Coded text columns: {key: codes per slot} and their code tables.
        self.code_tables: dict[str, Codes] = {
            k: Codes(STATES if k == "state" else (default,)) for k, default in CODED.items()
        }
        self.codes: dict[str, array] = {k: array("B" if k == "state" else "I") for k in CODED}
        self.errors: dict[int, str] = {}  # {slot: error text}: most tasks have none
        # Slots ended FAILED by presumption (their job ended and nothing had reported their
        # end): a report of the attempt's real end that arrives later replaces it.
        self._presumed: set[int] = set()
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
        return self.get(task_id) is not None

    def get(self, task_id: str, attempt: int | None = None) -> TaskView | None:
        """An attempt of a task: ``attempt``, or its newest kept one."""
        if attempt is not None:
            slot = self._find(task_id, attempt)
            return None if slot < 0 else TaskView(self, slot)
        slots = self.attempt_slots(task_id)
        return TaskView(self, slots[-1]) if slots else None

    def attempt_slots(self, task_id: str) -> list[int]:
        """The slots of a task's kept attempts, first attempt first."""
        key = id_key(task_id)
        top = self._retried.get(task_id if key is None else key, 0)
        found = (self._find(task_id, a) for a in range(top + 1))
        return [s for s in found if s >= 0]

    def attempts(self, task_id: str) -> list[dict[str, Any]]:
        """Where and how each kept attempt of a task ran (the task detail's list)."""
        out = []
        for s in self.attempt_slots(task_id):
            r = self.row(s)
            out.append({k: r[k] for k in ATTEMPT_FIELDS})
        return out

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
    def _find(self, task_id: Any, attempt: int = 0) -> int:
        """The slot of the task's ``attempt``, or -1; on a miss, ``_miss`` is (key, free
        entry)."""
        key = id_key(task_id)
        if key is None:
            self._miss = (None, EMPTY_ENTRY)
            return self._odd.get((task_id, attempt), -1)
        mask, hashed, ids, attempts = self._mask, self._hashed, self._ids, self.attempt
        i = _home(key, attempt) & mask
        while True:
            s = hashed[i]
            if s == EMPTY_ENTRY:
                self._miss = (key, i)
                return -1
            o = s * ID_BYTES
            if ids[o : o + ID_BYTES] == key and attempts[s] == attempt:
                return s
            i = (i + 1) & mask

    def _unhash(self, slot: int) -> None:
        """Takes ``slot``'s id out of the hash table, shifting back the entries after it
        (linear probing's deletion without tombstones: lookups stay as short as inserts)."""
        odd = self._odd_at.pop(slot, None) if self._odd_at else None
        if odd is not None:
            del self._odd[(odd, self.attempt[slot])]
            return
        mask, hashed, ids, attempts = self._mask, self._hashed, self._ids, self.attempt
        o = slot * ID_BYTES
        i = _home(bytes(ids[o : o + ID_BYTES]), attempts[slot]) & mask
        while hashed[i] != slot:
            i = (i + 1) & mask
        j = i
        while True:
            j = (j + 1) & mask
            s = hashed[j]
            if s == EMPTY_ENTRY:
                break
            o = s * ID_BYTES
            home = _home(bytes(ids[o : o + ID_BYTES]), attempts[s]) & mask
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
        """Applies one event to its attempt's row and returns the slot, or -1 for a late
        event of an attempt evicted past the cap (counted in ``late_dropped``). The node an
        event's ``extra`` names is where the attempt ran; ``node_id`` is the caller's guess,
        used only while the attempt has no node."""
        attempt = attempt if isinstance(attempt, int) and 0 <= attempt < 2**31 else 0
        slot = self._find(task_id, attempt)
        if slot < 0:
            if self._evicted and self._recently_evicted(task_id, attempt):
                self.late_dropped += 1
                return -1
            slot = self._insert(task_id, job_id, attempt)
            if attempt:
                self._follow(task_id, slot, attempt, t)
        codes, times = self.codes, self.times
        states, names = codes["state"], codes["name"]
        old_state, old_name = states[slot], names[slot]
        tm = None
        ran_on = None
        if extra:
            name = extra.get("name") or extra.get("function")
            if name and not old_name:  # code 0: no name yet
                self._put("name", slot, name)
            if extra.get("actor_id"):
                self._put("actor_id", slot, extra["actor_id"])
            if extra.get("placement_group_id"):
                self._put("placement_group_id", slot, extra["placement_group_id"])
            if extra.get("worker_id"):
                self._put("worker_id", slot, extra["worker_id"])
            pid = extra.get("pid")
            if pid and isinstance(pid, int) and 0 < pid < 2**31:
                self.pid[slot] = pid
            ran_on = extra.get("node_id")
            error = extra.get("error")
            if error and len(error) > len(self.errors.get(slot) or ""):
                # Two accounts of one failure may come in either order (the worker's, with
                # the traceback, and the owner's "died before it ran"): the fuller one is
                # kept, whatever the order.
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
            if "t_pending" in extra or "t_scheduled" in extra or "t_assign" in extra:
                # The agent folded this attempt's earlier phases into its end (one event for
                # up to four: agent/fold_phases.py); their times ride along.
                for col in FOLDED_TIMES:
                    v = extra.get(col)
                    if isinstance(v, int | float) and times[col][slot] != times[col][slot]:
                        times[col][slot] = v
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
        rank = RANK.get(state)
        # A terminal state stays; otherwise the later phase wins (events of one attempt come
        # from its owner and its worker, in any order).
        if rank is not None and cur < FIRST_TERMINAL and PHASE[rank] >= PHASE[cur]:
            cur = rank
        elif state in TERMINAL and self._presumed and slot in self._presumed:
            cur = self._unpresume(slot, rank, extra)
        if state == "PENDING_ARGS_AVAIL" and times["t_pending"][slot] != times["t_pending"][slot]:
            times["t_pending"][slot] = t
        elif state == "RETRYING" and times["t_pending"][slot] != times["t_pending"][slot]:
            times["t_pending"][slot] = t  # this attempt came to be
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
        if ran_on:
            if codes["node_id"][slot] != self.code_tables["node_id"].code.get(ran_on):
                self._put("node_id", slot, ran_on)
        elif node_id and not codes["node_id"][slot]:  # code 0: not known yet
            self._put("node_id", slot, node_id)
        if cur != old_state:
            self._set_state(slot, old_state, cur)
        if cur != old_state or names[slot] != old_name:
            name_of = self.code_tables["name"].values
            _dec(self.by_name_state, (name_of[old_name], STATES[old_state]))
            self.by_name_state[(name_of[names[slot]], STATES[cur])] += 1
        return slot

    def _unpresume(self, slot: int, rank: int, extra: dict[str, Any] | None) -> int:
        """A reported end of an attempt presumed FAILED: the report is the truth (a busy
        node's workers may flush their last events after the job-end grace). Its time and
        error are the report's; ``ended`` keeps counting the presumed move too (a counter
        never goes down)."""
        self._presumed.discard(slot)
        self.times["t_end"][slot] = UNKNOWN_TIME  # the report's time is set below
        error = extra.get("error") if extra else None
        if error:
            self.errors[slot] = str(error)[:4000]
        else:
            self.errors.pop(slot, None)
        self._put("error_type", slot, (extra or {}).get("error_type") or None)
        return rank

    def _set_state(self, slot: int, old: int, new: int) -> None:
        self.codes["state"][slot] = new
        refs = self.code_tables["state"].refs
        refs[old] -= 1
        refs[new] += 1
        if new >= FIRST_TERMINAL:
            self.ended[STATES[new]] += 1

    def _follow(self, task_id: str, slot: int, attempt: int, t: float) -> None:
        """A new attempt (``slot``) of a task: it takes the task's name, job and actor from
        the attempt before it, which ends FAILED now if nothing had ended it."""
        key = id_key(task_id)
        key = task_id if key is None else key
        if self._retried.get(key, 0) < attempt:
            self._retried[key] = attempt
        prev = next(
            (s for a in range(attempt - 1, -1, -1) if (s := self._find(task_id, a)) >= 0), -1
        )
        if prev < 0:
            return
        for col in ("name", "job_id", "actor_id", "placement_group_id"):
            value = self.codes[col][prev]
            if value and not self.codes[col][slot]:
                self._put(col, slot, self.code_tables[col].values[value])
        if self.codes["name"][slot]:  # the summary counted it as nameless: now it has one
            _dec(self.by_name_state, ("", STATES[0]))
            self.by_name_state[(self.cols["name"][slot], STATES[0])] += 1
        if self.codes["state"][prev] < FIRST_TERMINAL:
            err = f"attempt {attempt - 1} was superseded by attempt {attempt} (a retry)"
            self.apply(task_id, "FAILED", t, attempt - 1, {"error": err})

    def place(self, task_id: str, attempt: int, where: dict[str, Any]) -> bool:
        """Fills where an attempt ran (``node_id``, ``worker_id``, ``pid``) from another
        source when its own events did not say; False if the attempt is not in the table."""
        slot = self._find(task_id, attempt)
        if slot < 0:
            return False
        if not self.codes["node_id"][slot] and where.get("node_id"):
            self._put("node_id", slot, where["node_id"])
            if where.get("worker_id") and not self.codes["worker_id"][slot]:
                self._put("worker_id", slot, where["worker_id"])
            pid = where.get("pid")
            if isinstance(pid, int) and 0 < pid < 2**31 and not self.pid[slot]:
                self.pid[slot] = pid
        return True

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
        self._presumed.update(open_slots)
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
        if start != start:  # never said it ran: a killed attempt is drawn from its push
            start = _pushed(self.times, slot)
        if end != end and start == start:
            end = math.inf  # running: drawn up to any later time
        if end > self._blk_end[b]:  # NaN (not known) compares false: left out
            self._blk_end[b] = end
        if start < self._blk_start[b]:
            self._blk_start[b] = start

    def _insert(self, task_id: Any, job_id: str, attempt: int) -> int:
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
            self.attempt.append(attempt)
            self._ids += key or NO_ID
        else:
            slot = self.seq % self.cap
            self._evict(slot)
            self._presumed.discard(slot)
            for k, col in codes.items():
                col[slot] = job if k == "job_id" else 0
            for col in self.times.values():
                col[slot] = UNKNOWN_TIME
            self.pid[slot] = 0
            self.attempt[slot] = attempt
            o = slot * ID_BYTES
            self._ids[o : o + ID_BYTES] = key or NO_ID
            if key is not None:  # the eviction may have moved entries: probe again
                entry = _home(key, attempt) & self._mask
                while self._hashed[entry] != EMPTY_ENTRY:
                    entry = (entry + 1) & self._mask
        self.seq += 1
        if key is None:
            self._odd[(task_id, attempt)] = slot
            self._odd_at[slot] = task_id
        else:
            self._hashed[entry] = slot
        for k, table in tables.items():
            if k != "job_id":
                table.refs[0] += 1  # the defaults: first state, no name, node...
        self.by_name_state[("", STATES[0])] += 1
        return slot

    def _recently_evicted(self, task_id: Any, attempt: int) -> bool:
        key = self._miss[0]  # what the ``_find`` that missed saw
        return (key if key is not None else task_id, attempt) in self._evicted_set

    def _evict(self, slot: int) -> None:
        # Remembered for a while: a late event of this task (the worker's RUNNING, sent on
        # its own schedule) must not bring it back as a task that never ends.
        odd = self._odd_at.get(slot) if self._odd_at else None
        o = slot * ID_BYTES
        key = odd if odd is not None else bytes(self._ids[o : o + ID_BYTES])
        attempt = self.attempt[slot]
        if len(self._evicted) == self._evicted.maxlen:
            self._evicted_set.discard(self._evicted[0])
        self._evicted.append((key, attempt))
        self._evicted_set.add((key, attempt))
        if attempt and self._retried.get(key) == attempt:
            del self._retried[key]  # its newest attempt goes: the older ones went before
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
            "placement_group_id": tables["placement_group_id"].values[
                codes["placement_group_id"][slot]
            ],
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


def _pushed(times: dict[str, array], slot: int) -> float:
    """When an attempt went to its worker (pushed; else submitted), NaN if not known."""
    t = times["t_scheduled"][slot]
    return t if t == t else times["t_pending"][slot]


def _home(key: bytes, attempt: int) -> int:
    """The id index's hash of a task id's attempt (the first attempt: the id's own hash)."""
    return hash(key) + attempt * 0x9E3779B1 if attempt else hash(key)


def _dec(counter: Counter, key: Any) -> None:
    n = counter.get(key, 0) - 1
    if n > 0:
        counter[key] = n
    else:
        counter.pop(key, None)
