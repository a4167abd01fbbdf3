"""The memory monitor's parts that need no node: which worker it kills (Ray's group-by-owner
policy), where it reads the usage (cgroup v1, v2, /proc/meminfo) and its test hook."""

from __future__ import annotations

import os

from ember.raylet import memory_monitor as mm
from ember.raylet.memory_monitor import Candidate, UsageReader, choose_victim, find_cgroup_limit

A, B = object(), object()  # two callers' connections


def _c(name: str, owner=A, t: float = 0.0, retriable: bool = True, actor: bool = False):
    return Candidate(name, None if actor else owner, actor, retriable, t)


def _pick(*cands):
    got = choose_victim(list(cands))
    return None if got is None else (got[0].worker, got[1])


def test_nothing_leased_nothing_killed():
    assert choose_victim([]) is None


def test_the_newest_retriable_task_of_a_caller_goes_first_with_leave_to_retry():
    assert _pick(_c("old", t=1), _c("new", t=2)) == ("new", True)


def test_retriable_work_goes_before_newer_work_without_retries():
    older = _c("retriable", t=1)
    assert _pick(older, _c("fragile", t=5, retriable=False)) == ("retriable", True)
    actor = _c("actor", t=9, retriable=False, actor=True)
    assert _pick(actor, _c("task", t=1)) == ("task", False)  # the caller's last task


def test_actors_and_tasks_without_retries_go_only_when_nothing_retriable_is_left():
    got = _pick(_c("t", t=1, retriable=False), _c("actor", t=2, retriable=False, actor=True))
    assert got == ("actor", False)  # the newest: an actor is a caller of its own
    assert _pick(_c("t1", t=1, retriable=False), _c("t2", t=2, retriable=False)) == ("t2", False)


def test_the_caller_with_the_most_tasks_loses_one_first():
    got = _pick(_c("a1", A, 1), _c("a2", A, 2), _c("b1", B, 3), _c("b2", B, 4), _c("b3", B, 5))
    assert got == ("b3", True)
    # Same counts: the caller whose first task started last.
    assert _pick(_c("a1", A, 1), _c("a2", A, 6), _c("b1", B, 3), _c("b2", B, 4)) == ("b2", True)


def test_a_lone_task_is_killed_without_leave_to_retry():
    # Killed and retried alone it would meet the same pressure for ever.
    assert _pick(_c("only", A, 1), _c("fragile", B, 2, retriable=False)) == ("only", False)


def _write(path, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_cgroup_v2_smallest_limit_up_the_tree(tmp_path):
    root = tmp_path / "cg"
    _write(root / "cgroup.controllers", "cpu memory")
    _write(root / "a" / "memory.max", "2000000\n")
    _write(root / "a" / "b" / "memory.max", "max\n")
    _write(tmp_path / "self", "0::/a/b\n")
    assert find_cgroup_limit(str(tmp_path / "self"), str(root)) == (2, str(root / "a"), 2000000)


def test_cgroup_v1_and_no_limit(tmp_path):
    root = tmp_path / "cg"
    _write(root / "memory" / "x" / "memory.limit_in_bytes", "9223372036854771712\n")
    _write(tmp_path / "self", "4:memory:/x\n1:cpu:/\n")
    assert find_cgroup_limit(str(tmp_path / "self"), str(root)) is None  # "no limit"
    _write(root / "memory" / "x" / "memory.limit_in_bytes", "3000000\n")
    assert find_cgroup_limit(str(tmp_path / "self"), str(root)) == (
        1,
        str(root / "memory" / "x"),
        3000000,
    )


def test_a_cgroups_usage_is_its_working_set(tmp_path, monkeypatch):
    d = tmp_path / "cg"
    _write(d / "memory.current", "1000\n")
    _write(d / "memory.stat", "anon 700\ninactive_file 300\nactive_file 0\n")
    monkeypatch.setattr(mm, "find_cgroup_limit", lambda: (2, str(d), 4000))
    reading = UsageReader().read()
    assert (reading.used, reading.total, reading.fraction) == (700, 4000, 0.175)


def test_without_a_cgroup_limit_meminfo_and_the_test_hook(tmp_path, monkeypatch):
    monkeypatch.setattr(mm, "find_cgroup_limit", lambda: None)
    real = UsageReader().read()
    total, available = mm.meminfo()
    assert real.source == "/proc/meminfo" and real.total == total > 0
    assert abs(real.used - (total - available)) < total * 0.05
    hook = tmp_path / "usage"
    hook.write_text("0.97\n")
    faked = UsageReader(str(hook)).read()
    assert faked.total == total and round(faked.fraction, 3) == 0.97
    hook.write_text("")  # being rewritten: the real value this once
    assert UsageReader(str(hook)).read().source == "/proc/meminfo"
