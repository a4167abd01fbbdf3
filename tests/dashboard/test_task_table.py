"""The task table's compact encoding: ids as raw bytes behind an open-addressing index, text
columns as refcounted codes, errors sparse; and that it reads back what was written."""

from __future__ import annotations

import random

from ember.dashboard.query import parse_filters
from ember.dashboard.task_columns import FIELDS
from ember.dashboard.task_table import TaskTable


def _finish(table: TaskTable, tid: str, **extra) -> int:
    table.apply(tid, "PENDING_ARGS_AVAIL", 1.0, 0, {"name": extra.pop("name", "f")})
    return table.apply(tid, "FINISHED", 2.0, 0, {"timings": {"start": 1.5}, **extra})


def test_ids_round_trip_canonical_and_odd():
    table = TaskTable(100)
    ids = [
        "ab" * 16,  # canonical: 32 lowercase hex digits, kept as 16 bytes
        "0" * 32,  # all digits, all zero bytes: still canonical
        "t1",  # a test's or a hand-made id: kept as given
        "AB" * 16,  # capitals: hex() would not give it back, so kept as given
        "ab" * 15,  # 30 digits
        "ab" * 17,  # 34 digits
        "ab " * 10 + "ab",  # fromhex skips spaces: not an id of 16 bytes
    ]
    for tid in ids:
        _finish(table, tid)
    assert len(table) == len(ids)
    rows = table.page([], limit=100, offset=0, sort_by=None, descending=False)["items"]
    assert [r["task_id"] for r in rows] == ids[::-1]
    for tid in ids:
        assert tid in table and table.get(tid).task_id == tid
        assert table.get(tid).public()["task_id"] == tid
    assert "ab" * 16 in table and "AB" * 16 in table and "aB" * 16 not in table
    assert "cd" * 16 not in table and table.get("t2") is None
    (rec,) = [r for r in table.scan() if r.task_id == "t1"]
    assert rec.state == "FINISHED" and rec.t_start == 1.5


def test_index_stays_right_through_evictions():
    """A small cap (a 16-entry hash table) and thousands of ids: every deletion shifts entries
    back along their probe paths, wrapping round the table; kept ids stay found, evicted ones
    are gone, and odd ids mixed in go the same way."""
    rnd = random.Random(7)
    table = TaskTable(5)
    kept: list[str] = []
    for i in range(3_000):
        tid = f"odd-{i}" if i % 7 == 0 else f"{rnd.getrandbits(128):032x}"
        _finish(table, tid)
        kept = [*kept, tid][-5:]
        if i % 13 == 0:
            _finish(table, kept[0])  # an event for a kept task: found, not inserted again
        assert [table.field(s, "task_id") for s in table.newest_slots()] == kept[::-1]
        assert all(t in table for t in kept)
    assert table.dropped == 3_000 - 5 and len(table) == 5
    assert not any(f"odd-{i}" in table for i in range(0, 2_990, 7))
    assert len(table._odd) == len(table._odd_at) == sum(t.startswith("odd-") for t in kept)


def test_codes_are_freed_when_no_kept_task_holds_them():
    """A long-running cluster: every task on a new worker, job, node and actor. The code
    tables hold the values of the kept tasks only (freed codes are reused), so they stay the
    size of the cap, not of everything ever seen; counts follow."""
    table = TaskTable(10)
    for i in range(2_000):
        tid = f"{i:032x}"
        table.apply(tid, "PENDING_ARGS_AVAIL", 1.0, 0, {"name": f"fn{i}"}, job_id=f"job{i}")
        table.apply(
            tid,
            "RUNNING",
            2.0,
            0,
            {"worker_id": f"w{i}", "actor_id": f"a{i}"},
            node_id=f"n{i}",
        )
    prefixes = {"name": "fn", "job_id": "job", "node_id": "n", "worker_id": "w", "actor_id": "a"}
    for key, prefix in prefixes.items():
        codes = table.code_tables[key]
        held = {v for v in codes.code if v not in ("", None)}
        assert held == {f"{prefix}{i}" for i in range(1_990, 2_000)}, key
        assert len(codes.code) == 11  # the default and the ten kept tasks' values
        assert len(codes.values) <= 12  # freed codes are reused, not appended
    assert table.counts["worker_id"] == {f"w{i}": 1 for i in range(1_990, 2_000)}
    assert table.counts["state"] == {"RUNNING": 10}
    assert table.code_tables["state"].refs == [0, 0, 0, 10, 0, 0, 0]
    assert table.by_name_state == {(f"fn{i}", "RUNNING"): 1 for i in range(1_990, 2_000)}


def test_a_value_kept_by_one_task_survives_another_leaving():
    table = TaskTable(2)
    _finish(table, "1" * 32, worker_id="w", node_id="n")
    _finish(table, "2" * 32, worker_id="w", node_id="n")
    _finish(table, "3" * 32, worker_id="x", node_id="n")  # evicts task 1: "w" still held
    assert table.get("2" * 32).worker_id == "w" and table.get("3" * 32).worker_id == "x"
    assert table.counts["worker_id"] == {"w": 1, "x": 1}
    assert table.counts["node_id"] == {"n": 2}
    # The same value set again is no change (taken before the old code is let go).
    table.apply("2" * 32, "FINISHED", 3.0, 0, {"worker_id": "w"})
    assert table.counts["worker_id"] == {"w": 1, "x": 1}


def test_errors_are_sparse_and_go_with_their_task():
    table = TaskTable(3)
    for i in range(3):
        _finish(table, f"{i:032x}", error="ValueError: boom" if i == 1 else None)
    assert table.errors == {table.get(f"{1:032x}").slot: "ValueError: boom"}
    assert table.get(f"{1:032x}").error == "ValueError: boom"
    assert table.get(f"{0:032x}").error is None
    for i in range(3, 5):  # evicts tasks 0 and 1: the error goes with task 1
        _finish(table, f"{i:032x}")
    assert table.errors == {} and table.get(f"{4:032x}").public()["error"] is None
    assert table.cols["error"][table.get(f"{4:032x}").slot] is None


def test_filters_read_codes_and_totals_come_from_counts():
    table = TaskTable(1_000)
    for i in range(300):
        _finish(table, f"{i:032x}", worker_id=f"w{i % 3}", name=f"f{i % 2}")
    page = table.page(parse_filters(["worker_id=w1"], FIELDS), 5, 0, None, False)
    assert page["total"] == 100 and len(page["items"]) == 5
    assert all(r["worker_id"] == "w1" for r in page["items"])
    page = table.page(parse_filters(["worker_id!=w1", "name=f0"], FIELDS), 5, 10, None, False)
    # No count answers two filters: the table scans for the total, and still pages by limit.
    assert page["total"] == 100 and len(page["items"]) == 5
    page = table.page(parse_filters(["pid="], FIELDS), 7, 0, None, False)  # a row field
    assert page["total"] == 300 and len(page["items"]) == 7
    page = table.page(parse_filters(["node_id="], FIELDS), 1, 0, None, False)
    assert page["total"] == 300  # None reads as "" in a filter, as in every list


def _summed(table: TaskTable) -> dict[str, int]:
    """The per-state counts the summary keeps, summed over functions."""
    out: dict[str, int] = {}
    for (_name, state), n in table.by_name_state.items():
        out[state] = out.get(state, 0) + n
    return out


def test_each_attempt_is_a_row_where_it_ran():
    """A retry after its node died: attempt 0 ran on node A, attempt 1 on node B. The owner's
    events (pending, its own guess of the node) never decide where an attempt ran."""
    table = TaskTable(100)
    tid = "cd" * 16
    table.apply(tid, "PENDING_ARGS_AVAIL", 1.0, 0, {"name": "slow"}, node_id="owner-node")
    table.apply(tid, "SUBMITTED_TO_WORKER", 1.1, 0, {"worker_id": "w-a", "node_id": "A", "pid": 11})
    table.apply(tid, "FAILED", 3.0, 0, {"error": "the worker died", "error_type": "WORKER_DIED"})
    table.apply(tid, "RETRYING", 3.0, 1, {"name": "slow"})
    assert table.get(tid).state == "RETRYING"
    table.apply(tid, "PENDING_NODE_ASSIGNMENT", 3.0, 1, None)
    assert table.get(tid).state == "RETRYING"  # still waiting for its retry to be placed
    table.apply(tid, "RUNNING", 3.5, 1, {"worker_id": "w-b", "node_id": "B", "pid": 22})
    table.apply(tid, "FINISHED", 4.0, 1, None, node_id="owner-node")
    # The first attempt's RUNNING, flushed late by its worker: it stays FAILED, gains a start.
    table.apply(tid, "RUNNING", 1.2, 0, {"worker_id": "w-a", "node_id": "A", "pid": 11})
    rows = sorted(table.page([], 10, 0, None, False)["items"], key=lambda r: r["attempt"])
    got = [(r["attempt"], r["state"], r["node_id"], r["worker_id"], r["pid"]) for r in rows]
    assert got == [(0, "FAILED", "A", "w-a", 11), (1, "FINISHED", "B", "w-b", 22)]
    assert rows[0]["error"] == "the worker died" and rows[1]["error"] is None
    assert [r["name"] for r in rows] == ["slow", "slow"]
    assert (rows[0]["start_time"], rows[0]["end_time"]) == (1.2, 3.0)
    newest = table.get(tid)
    assert (newest.attempt, newest.node_id) == (1, "B") and table.get(tid, 0).node_id == "A"
    assert [a["node_id"] for a in table.attempts(tid)] == ["A", "B"]
    assert table.get(tid, 2) is None
    assert _summed(table) == {"FAILED": 1, "FINISHED": 1}
    assert dict(table.counts["state"]) == {"FAILED": 1, "FINISHED": 1}


def test_a_new_attempt_ends_one_nothing_ended_and_a_killed_one_is_drawn():
    """An owner whose account of attempt 0's failure was lost: attempt 1 ends it. An attempt
    whose worker died before it said it ran is on the timeline from its push to its end."""
    table = TaskTable(100)
    tid = "ef" * 16
    table.apply(tid, "PENDING_ARGS_AVAIL", 1.0, 0, {"name": "Crashy.work", "actor_id": "ac"})
    table.apply(tid, "SUBMITTED_TO_WORKER", 1.5, 0, {"node_id": "A", "pid": 7, "worker_id": "w"})
    table.apply(tid, "PENDING_NODE_ASSIGNMENT", 2.0, 1, None)
    first = table.get(tid, 0)
    assert first.state == "FAILED" and "superseded by attempt 1" in first.error
    later = table.get(tid, 1)
    assert (later.name, later.actor_id) == ("Crashy.work", "ac")
    (rec,) = list(table.scan())
    assert (rec.attempt, rec.node_id, rec.pid, rec.t_start, rec.t_end) == (0, "A", 7, 1.5, 2.0)
    assert _summed(table) == {"FAILED": 1, "PENDING_NODE_ASSIGNMENT": 1}


def test_attempts_through_evictions():
    """Retried tasks past the cap: each attempt is its own slot; the newest-attempt index
    forgets a task once its newest attempt goes, and late events of evicted attempts drop."""
    rnd = random.Random(3)
    table = TaskTable(6)
    ids = [f"{rnd.getrandbits(128):032x}" if i % 5 else f"odd-{i}" for i in range(400)]
    for tid in ids:
        for attempt in range(3):
            table.apply(tid, "RUNNING", 1.0, attempt, {"name": "f", "node_id": f"n{attempt}"})
        assert [a["node_id"] for a in table.attempts(tid)] == ["n0", "n1", "n2"]
        assert table.get(tid).attempt == 2
    kept = ids[-2:]
    assert len(table) == 6 and len(table._retried) == 2  # the kept tasks' only
    assert table.apply(ids[-3], "FINISHED", 2.0, 2, None) == -1 and table.late_dropped == 1
    assert ids[-3] not in table and all(t in table for t in kept)


def test_a_late_report_replaces_a_failure_presumed_at_job_end():
    """A job's driver exits once every task is done, but a busy node's worker may flush its
    last events after the job-end grace: the sweep presumes those tasks FAILED, and the
    worker's own FINISHED (or FAILED with its error), arriving later, is what they show."""
    table = TaskTable(100)
    job = "0100"
    done, crashed, lost = (f"{i:032x}" for i in (1, 2, 3))
    for tid in (done, crashed, lost):
        table.apply(tid, "PENDING_ARGS_AVAIL", 1.0, 0, {"name": "f"}, job_id=job)
        table.apply(tid, "RUNNING", 1.5, 0, {"worker_id": "w1"}, job_id=job)
    assert table.fail_open_tasks(job, 3.0, "Job finishes as driver exits.", "WORKER_DIED") == 3
    assert dict(table.counts["state"]) == {"FAILED": 3}
    table.apply(done, "FINISHED", 2.5, 0, {"timings": {"end": 2.5}}, job_id=job)
    crash = {"error": "ValueError: boom", "error_type": "TASK_EXECUTION_EXCEPTION"}
    table.apply(crashed, "FAILED", 2.6, 0, crash)
    rows = {tid: table.get(tid).public() for tid in (done, crashed, lost)}
    assert rows[done]["state"] == "FINISHED" and rows[done]["error"] is None
    assert rows[done]["error_type"] is None and rows[done]["end_time"] == 2.5
    assert rows[crashed]["state"] == "FAILED"
    assert rows[crashed]["error"] == "ValueError: boom"
    assert rows[crashed]["error_type"] == "TASK_EXECUTION_EXCEPTION"
    assert rows[lost]["state"] == "FAILED" and rows[lost]["error_type"] == "WORKER_DIED"
    assert dict(table.counts["state"]) == {"FINISHED": 1, "FAILED": 2}
    # A real end is final: a later duplicate or a stray earlier phase changes nothing.
    table.apply(done, "FAILED", 4.0, 0, {"error": "late", "error_type": "WORKER_DIED"})
    table.apply(done, "RUNNING", 4.1, 0, None)
    assert table.get(done).public()["state"] == "FINISHED"
