"""The raylet's admission of worker starts (``raylet/start_admission.py``) with a fake
memory reading: held within 128 MiB of the kill threshold, said once per episode."""

from __future__ import annotations

from ember.raylet.memory_monitor import MemoryReading
from ember.raylet.start_admission import START_MARGIN, StartAdmission

GIB = 1024**3


class Reader:
    def __init__(self) -> None:
        self.used = 0

    def read(self) -> MemoryReading:
        return MemoryReading(self.used, 10 * GIB, "/proc/meminfo")


def test_starts_are_held_near_the_threshold_and_said_once_per_episode() -> None:
    reader = Reader()
    gate = StartAdmission(reader, threshold=0.9)
    reader.used = 9 * GIB - START_MARGIN - 1
    assert gate.memory_allows(10) is None
    reader.used = 9 * GIB - START_MARGIN
    gate._read_at = -1e9  # a fresh reading, not the cached one
    why = gate.memory_allows(10)
    assert why and "88.8% used (8.9 GiB of 10.0 GiB" in why and "10 workers" in why
    assert "EMBER_MEMORY_USAGE_THRESHOLD 0.9" in why and "128 MiB" in why
    assert gate.memory_allows(10) == ""  # held still, not said again
    assert gate.held_total == 2
    reader.used = 9 * GIB - START_MARGIN - 1
    gate._read_at = -1e9
    assert gate.memory_allows(10) == ""  # held until twice the margin is free
    reader.used = 9 * GIB - 2 * START_MARGIN - 1
    gate._read_at = -1e9
    assert gate.memory_allows(10) is None  # the episode ends
    reader.used = 9 * GIB
    gate._read_at = -1e9
    assert gate.memory_allows(11)  # a new episode is said again


def test_starts_are_held_near_the_process_limit_and_say_which(monkeypatch) -> None:
    from ember.raylet import start_admission as sa

    monkeypatch.setattr(sa, "task_limit", lambda: (4096, "kernel.pid_max 4096"))
    running = [1000]
    monkeypatch.setattr(sa, "running_tasks", lambda: running[0])
    gate = StartAdmission(Reader(), threshold=0.9)
    assert gate.tasks_allow(8) is None
    running[0] = 4096 - sa.TASKS_RESERVED - 2 * 8
    why = gate.tasks_allow(8)
    assert why and "runs 3568 processes and threads" in why and "kernel.pid_max 4096" in why
    assert gate.tasks_allow(8) == ""  # said once
    running[0] = 1000
    assert gate.tasks_allow(8) is None


def test_the_real_limits_are_read() -> None:
    from ember.raylet.start_admission import running_tasks, task_limit

    limit, names = task_limit()
    assert limit > 0 and "kernel.pid_max" in names
    assert 0 < running_tasks() < limit
