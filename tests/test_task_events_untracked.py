"""A driver's task-event buffer holds plain data, so CPython's collector stops tracking it.

The buffer keeps the last ``task_events_buffer_size`` (100,000) events for seconds. When an
event's ``extra`` was a dict, every buffered event stayed tracked, lived to the oldest
generation and made each full collection walk all of them: in a 1:1 async actor-call loop,
~2.7 full collections a second of ~76 ms each, a fifth of the driver's time. Packed into
tuples of plain values (``task_events.pack_extra``), the collector untracks them; the
dashboard still reads every field (its task table, the timeline's arrows)."""

from __future__ import annotations

import gc

import ember
from ember import global_state
from ember.core_worker.task_events import pack_extra, unpack_extra
from ember_test_utils import wait_until


@ember.remote
def produce(x: int) -> int:
    return x


@ember.remote
def consume(x: int, fail: bool = False) -> int:
    print("consumed", x)  # a log range rides in the reply
    if fail:
        raise ValueError("consume gives up")
    return x + 1


@ember.remote
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def inc(self) -> int:
        self.n += 1
        return self.n


def test_pack_extra_round_trip_keeps_every_value():
    extra = {
        "timings": {"start": 1.0, "end": 2.5},
        "pid": 7,
        "node_id": "ab" * 16,
        "worker_id": b"\x01" * 16,
        "arg_tasks": ["cd" * 16],
        "log": (0, 10, 0, 0),
        "error": None,
    }
    packed = pack_extra(extra)
    assert type(packed) is tuple
    back = unpack_extra(packed)
    assert back == {**extra, "log": [0, 10, 0, 0]}  # a tuple comes back a list, as in JSON
    plain = {"name": "f", "actor_id": b"\x02" * 16}
    assert pack_extra(plain) == ("name", "f", "actor_id", b"\x02" * 16)
    assert unpack_extra(pack_extra(plain)) == plain
    assert unpack_extra({"a": 1}) == {"a": 1} and unpack_extra(None) is None


def test_buffered_events_are_untracked_and_the_dashboard_reads_them(ember_start):
    ctx = ember_start(num_cpus=2)
    worker = global_state.worker
    counter = Counter.remote()
    assert ember.get([counter.inc.remote() for _ in range(200)]) == list(range(1, 201))
    first = produce.remote(1)
    ember.get([consume.remote(first) for _ in range(20)])
    failed = consume.remote(5, fail=True)
    try:
        ember.get(failed)
    except ember.exceptions.RayTaskError:
        pass

    gc.collect()
    gc.collect()  # a tuple seen before the tuple inside it is untracked at the next pass
    events = [e for e in worker.events if e[1] != "PROFILE"]
    states = {e[1] for e in events}
    assert {"PENDING_ARGS_AVAIL", "SUBMITTED_TO_WORKER", "FINISHED", "FAILED"} <= states, states
    tracked = [e for e in events if gc.is_tracked(e)]
    assert not tracked, f"{len(tracked)} of {len(events)} events still tracked, e.g. {tracked[0]}"

    # Everything the events said reaches the dashboard: the failed task's error and log
    # range, the consumers' producer (the timeline's arrow), a call's worker and times.
    import httpx

    url = ctx.dashboard_url.rstrip("/")
    failed_hex = failed.task_id().hex()

    def failed_row():
        rows = httpx.get(f"{url}/api/tasks?limit=1000", timeout=10).json()["items"]
        row = next((r for r in rows if r["task_id"] == failed_hex), None)
        return row if row and row["state"] == "FAILED" else None

    row = wait_until(failed_row, 30, 0.2, "the failed task's row")
    assert row["error_type"] == "TASK_EXECUTION_EXCEPTION", row
    assert "consume gives up" in (row["error"] or ""), row
    assert row["worker_id"] and row["pid"], row
    assert row["submitted_time"] <= row["start_time"] <= row["end_time"], row
