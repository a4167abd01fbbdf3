"""The side-by-side's further readings of Ray: a difference that holds on every one of Ray's
readings (up to three) fails; one that a later reading agrees with is not a difference; one
where Ray gave no answer in time on its readings is said and left out."""

from __future__ import annotations

import ember_test_utils as etu


def test_later_readings_judge_and_no_answer_is_not_a_difference(monkeypatch, capsys):
    ember = {"same": {"cancel": {"running": ["raised", ["TaskCancelledError"]], "ok": 1}}}
    timed_out = ["raised", ["TimeoutError", "GetTimeoutError"]]
    first = {"same": {"cancel": {"running": timed_out, "ok": 2}}}
    readings: list = []
    asked: list = []

    def run_compare_program(*args, **kwargs):
        asked.append(args)
        return readings.pop(0)

    monkeypatch.setattr(etu, "run_compare_program", run_compare_program)
    # "ok" differs on all three readings: a difference; "running" had no answer: left out.
    readings += [{"same": {"cancel": {"running": timed_out, "ok": 2}}}] * 2
    differ, used = etu.differences_after_a_second_reading("p", "py", ember, first)
    assert differ == {"cancel.ok": (1, 2)}
    assert len(asked) == 2 and used == {"same": {"cancel": {"running": timed_out, "ok": 2}}}
    assert "no answer for cancel.running" in capsys.readouterr().out
    # A second reading that agrees is the judge: no third.
    asked.clear()
    readings.append({"same": {"cancel": {"running": ["raised", ["TaskCancelledError"]], "ok": 1}}})
    assert etu.differences_after_a_second_reading("p", "py", ember, first)[0] == {}
    assert len(asked) == 1
    # A third reading that agrees on what still differed: no difference either.
    asked.clear()
    readings += [first, ember]
    assert etu.differences_after_a_second_reading("p", "py", ember, first)[0] == {}
    assert len(asked) == 2
    # What a later reading newly differs on is not counted (it agreed before).
    asked.clear()
    readings += [{"same": {"cancel": {"running": ["raised", ["TaskCancelledError"]], "ok": 3}}}]
    partly = {"same": {"cancel": {"running": timed_out, "ok": 1}}}
    differ, _ = etu.differences_after_a_second_reading("p", "py", ember, partly)
    assert differ == {}
    # Agreement at once: Ray is not read again.
    asked.clear()
    assert etu.differences_after_a_second_reading("p", "py", ember, ember) == ({}, ember)
    assert asked == []
