"""The agent folds each attempt's earlier phases into its end when both are in one batch
(``agent/fold_phases.py``), and the dashboard's table reads the folded end
as it read the separate events: the same state, times, name, node and counts."""

from __future__ import annotations

from ember.agent.fold_phases import fold_phases
from ember.dashboard.state import DashboardState

A, B = b"a" * 16, b"b" * 16


def _task_events(tid: bytes, attempt: int = 0, t0: float = 100.0) -> list[tuple]:
    return [
        (tid, "PENDING_ARGS_AVAIL", t0, attempt, {"name": "f", "actor_id": None}),
        (tid, "PENDING_NODE_ASSIGNMENT", t0 + 1, attempt, None),
        (
            tid,
            "SUBMITTED_TO_WORKER",
            t0 + 2,
            attempt,
            {"node_id": "n1", "pid": 7, "worker_id": "w1"},
        ),
        (tid, "FINISHED", t0 + 4, attempt, {"function": "f", "node_id": "n1", "pid": 7}),
    ]


def test_a_tasks_phases_fold_into_its_end_and_the_folded_events_do_not_change():
    events = _task_events(A)
    kept = [dict(e[4]) if e[4] else None for e in events[:3]]
    out = fold_phases(list(events))
    assert out == [
        (
            A,
            "FINISHED",
            104.0,
            0,
            {
                "name": "f",
                "actor_id": None,
                "node_id": "n1",
                "pid": 7,
                "worker_id": "w1",
                "function": "f",
                "t_pending": 100.0,
                "t_assign": 101.0,
                "t_scheduled": 102.0,
            },
        )
    ]
    assert [dict(e[4]) if e[4] else None for e in events[:3]] == kept  # only read
    assert fold_phases(list(events)) == out  # a batch sent again folds to the same


def test_only_an_attempt_whose_end_is_in_the_batch_folds():
    running = [(B, "PENDING_ARGS_AVAIL", 1.0, 0, {"name": "g"})]
    retried = [
        (A, "PENDING_ARGS_AVAIL", 1.0, 0, {"name": "f"}),
        (A, "FAILED", 2.0, 0, {"error": "x"}),
        (A, "RETRYING", 3.0, 1, None),
        (A, "SUBMITTED_TO_WORKER", 4.0, 1, {"worker_id": "w2"}),
    ]
    out = fold_phases(running + retried)
    assert out[0] == running[0]  # no end yet: as recorded
    assert out[1] == (A, "FAILED", 2.0, 0, {"name": "f", "error": "x", "t_pending": 1.0})
    assert out[2:] == retried[2:]  # the retry's attempt has not ended
    assert fold_phases(running) is running


def _table_after(batches: list[list[tuple]]) -> dict:
    state = DashboardState()
    for events in batches:
        state.add_task_events(
            "n1",
            "01000000",
            [[e[0].hex(), e[1], e[2], e[3], e[4]] for e in events],
        )
    view = state.tasks.get(A.hex())
    return {
        "row": {k: view.public().get(k) for k in ("state", "name", "node_id", "pid")},
        "events": view.events(),
        "counts": state.tasks_counts(),
    }


def test_the_dashboard_reads_a_folded_end_as_the_separate_events():
    separate = _table_after([_task_events(A)])
    folded = _table_after([fold_phases(_task_events(A))])
    assert folded == separate
    assert [e["state"] for e in folded["events"]] == [
        "PENDING_ARGS_AVAIL",
        "PENDING_NODE_ASSIGNMENT",
        "SUBMITTED_TO_WORKER",
        "FINISHED",
    ]
