"""Workers that die before registering (``raylet/start_failures.py``): one line at once with
the cause read from the worker's stderr, the rest summed up later by cause, and the log
files of all but the first ``LOGS_KEPT`` removed."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from ember.raylet import start_failures as sf


def _failed(tmp_path, i: int, text: str) -> SimpleNamespace:
    w = SimpleNamespace(
        worker_id=i.to_bytes(28, "big"),
        pid=1000 + i,
        exit_reason="the worker process exited with code 1",
    )
    base = tmp_path / f"worker-{w.worker_id.hex()[:16]}-{w.pid}"
    (base.parent / (base.name + ".out")).write_text("")
    (base.parent / (base.name + ".err")).write_text(
        f"Traceback (most recent call last):\n  ...\n{text}\n\n"
    )
    return w


def test_a_burst_is_said_once_then_summed_by_cause(tmp_path, caplog) -> None:
    now = [100.0]
    failures = sf.StartFailures(str(tmp_path), lambda: now[0])
    caplog.set_level(logging.ERROR, logger="ember.raylet")
    for i in range(30):
        failures.record(
            _failed(tmp_path, i, "ConnectionRefusedError: [Errno 111] Connection refused")
        )
    failures.record(_failed(tmp_path, 30, "MemoryError"))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "worker 1000 died while starting: the worker process exited with code 1: "
        "ConnectionRefusedError: [Errno 111] Connection refused"
    ]
    failures.flush()  # too soon: still counting
    assert len(caplog.records) == 1
    now[0] += sf.LOG_EVERY_S
    failures.flush()
    assert caplog.records[-1].getMessage() == (
        "30 more workers died while starting in the last 10 s: 29 x the worker process exited "
        "with code 1: ConnectionRefusedError: [Errno 111] Connection refused; 1 x the worker "
        "process exited with code 1: MemoryError"
    )
    assert failures.total == 31
    # The first LOGS_KEPT failures keep their files; the others' are gone.
    assert len(list(tmp_path.glob("*.err"))) == sf.LOGS_KEPT
    assert len(list(tmp_path.glob("*.out"))) == sf.LOGS_KEPT
