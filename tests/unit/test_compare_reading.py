"""The side-by-side's second reading of Ray: a difference that holds on Ray's second reading
fails; one where Ray gave no answer in time on both readings is said and left out."""

from __future__ import annotations

import ember_test_utils as etu


def test_a_second_reading_judges_and_no_answer_is_not_a_difference(monkeypatch, capsys):
    ember = {"same": {"cancel": {"running": ["raised", ["TaskCancelledError"]], "ok": 1}}}
    timed_out = ["raised", ["TimeoutError", "GetTimeoutError"]]
    first = {"same": {"cancel": {"running": timed_out, "ok": 2}}}
    readings = [{"same": {"cancel": {"running": timed_out, "ok": 2}}}]
    monkeypatch.setattr(etu, "run_compare_program", lambda *a, **k: readings.pop())
    differ, used = etu.differences_after_a_second_reading("p", "py", ember, first)
    # "ok" differs on both readings: a difference; "running" had no answer twice: left out.
    assert differ == {"cancel.ok": (1, 2)}
    assert "no answer for cancel.running" in capsys.readouterr().out
    # A second reading that agrees is the judge.
    readings.append({"same": {"cancel": {"running": ["raised", ["TaskCancelledError"]], "ok": 1}}})
    assert etu.differences_after_a_second_reading("p", "py", ember, first)[0] == {}
    # Agreement at once: Ray is not read again.
    assert etu.differences_after_a_second_reading("p", "py", ember, ember) == ({}, ember)
