"""A worker's RUNNING events wait apart until its next flush: one of a task still running
then is sent once, one of a task that ended first is not (its owner's end event says where
and when it ran); other events go as before."""

from __future__ import annotations

import asyncio
import threading
import types

from ember.core_worker.event_export import EventExporter
from ember.core_worker.task_events import TaskEvents


class _Conn:
    closed = False

    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, op: str, body: dict) -> None:
        self.sent.extend(body["events"])


def _exporter(events: TaskEvents) -> tuple[EventExporter, _Conn]:
    host = types.SimpleNamespace(
        node={"session_dir": "/nonexistent"}, job_id=b"j", worker_id=b"w", shutting_down=False
    )
    exporter = EventExporter(host, events)
    exporter.conn = conn = _Conn()
    return exporter, conn


def _running(task_id: bytes) -> tuple:
    return (task_id, "RUNNING", 1.0, 0, {"worker_id": b"w", "pid": 1})


def test_only_the_starts_of_tasks_still_running_are_sent_each_once():
    events = TaskEvents(threading.local(), b"root")
    exporter, conn = _exporter(events)
    events.record_start(_running(b"short"))
    events.record_start(_running(b"long"))
    events.append((b"other", "PROFILE", 1.0, 0, None))
    events.ended_here(b"short")
    assert asyncio.run(exporter.flush()) is True
    assert [(e[0], e[1]) for e in conn.sent] == [(b"other", "PROFILE"), (b"long", "RUNNING")]
    # Sent once: the next flush has nothing, and a start alone is something to send.
    conn.sent.clear()
    assert asyncio.run(exporter.flush()) is False and conn.sent == []
    events.record_start(_running(b"next"))
    assert asyncio.run(exporter.flush()) is True
    assert [e[0] for e in conn.sent] == [b"next"]
    events.ended_here(b"next")  # ended after its start was sent: nothing more to do
    assert events.starts == {}


def test_a_start_wakes_a_sleeping_exporter_once():
    events = TaskEvents(threading.local(), b"root")
    woken: list[int] = []
    events.wake = lambda: woken.append(1)
    events.record_start(_running(b"a"))
    events.record_start(_running(b"b"))
    assert woken == [1] and events.wake is None
