"""The progress table a user reads in the terminal: 100 trials stay one screen (Ray's
max_progress_rows: the first rows of each status and how many more), the status summary line,
the current best trial, rows best-first with sort_by_metric, and the errored trials' table at
the end. Pure formatting: trials are records, no cluster."""

from __future__ import annotations

import pytest
from ember import tune
from ember.tune.progress import CLIReporter, make_reporter
from ember.tune.trial import ERROR, RUNNING, TERMINATED, Trial


def trials(n_running: int = 3, n_done: int = 96, n_error: int = 1) -> list[Trial]:
    out = []
    for i in range(n_running + n_done + n_error):
        status = RUNNING if i < n_running else TERMINATED if i < n_running + n_done else ERROR
        t = Trial(f"abc_{i:05d}", {"lr": i / 1000, "layers": 2}, str(i), "train", status=status)
        t.evaluated_params = {"lr": i / 1000}
        t.dirname, t.experiment_dir = f"train_abc_{i:05d}", "/tmp/exp"
        t.update_metrics({"score": (i * 37) % 100, "training_iteration": 10, "time_total_s": 1.5})
        if status == ERROR:
            t.num_failures = 1
        out.append(t)
    return out


def test_a_hundred_trials_stay_one_screen_best_first():
    all_trials = trials()
    reporter = CLIReporter(max_progress_rows=20, sort_by_metric=True, metric="score", mode="max")
    lines = reporter.table(all_trials).splitlines()
    assert lines[0] == "Trial status: 3 RUNNING | 96 TERMINATED | 1 ERROR"
    assert lines[1].startswith("Current time: ")
    best = max(all_trials, key=lambda t: t.last_result["score"])
    assert lines[2] == (
        f"Current best trial: {best.trial_id} with score={best.last_result['score']} "
        f"and params={{'lr': {best.config['lr']}}}"
    )
    header = lines[3].split()
    assert header[:3] == ["Trial", "name", "status"] and "lr" in header and "score" in header
    assert "layers" not in header  # a constant is not a column; the sampled values are
    rows = lines[5:-1]
    # 5 rows per status, in Ray's order (RUNNING, TERMINATED, ..., ERROR), then the rest counted
    assert [r.split()[1] for r in rows] == [RUNNING] * 3 + [TERMINATED] * 5 + [ERROR]
    assert lines[-1] == "91 more TERMINATED"
    scores = [int(r.split()[-1]) for r in rows[3:8]]
    assert scores == sorted(scores, reverse=True) and scores[0] == best.last_result["score"]


def test_the_final_table_lists_every_trial_and_the_errored_ones():
    all_trials = trials()
    text = CLIReporter(metric="score", mode="min").table(all_trials, all_rows=True)
    lines = text.splitlines()
    assert sum(1 for line in lines if line.startswith("train_abc_")) == 100 + 1
    assert "Number of errored trials: 1" in lines
    assert lines[-1].split() == ["train_abc_00099", "1", "/tmp/exp/train_abc_00099/error.txt"]


def test_few_trials_show_every_row_and_verbose_drives_what_prints(capsys):
    few = trials(1, 2, 0)
    reporter = make_reporter(None, 1)
    reporter.on_trial_result(0, few, few[0], {"score": 1, "training_iteration": 1})
    out = capsys.readouterr().out
    assert out.startswith("Trial status: 1 RUNNING | 2 TERMINATED")
    assert "more" not in out and out.count("train_abc_") == 3
    reporter.on_trial_result(0, few, few[0], {"score": 2, "training_iteration": 2})
    assert capsys.readouterr().out == ""  # at most one block per max_report_frequency
    verbose = make_reporter(None, 2)
    verbose.on_trial_result(0, few, few[0], {"score": 2, "training_iteration": 2})
    assert capsys.readouterr().out.startswith(
        "Trial train_abc_00000 finished iteration 2: {'score': 2}"
    )
    silent = make_reporter(None, 0)
    silent.on_trial_result(0, few, few[0], {"score": 2, "training_iteration": 2})
    silent.on_experiment_end(few)
    assert capsys.readouterr().out == ""


def test_bad_reporter_settings_are_named():
    with pytest.raises(ValueError, match="max_progress_rows must be a positive integer"):
        tune.CLIReporter(max_progress_rows=0)
    with pytest.raises(ValueError, match="verbose must be 0, 1, 2 or 3"):
        tune.RunConfig(verbose=7)
    with pytest.raises(TypeError, match="progress_reporter must be a tune.CLIReporter"):
        make_reporter(object(), 1)


def test_the_status_block_comes_on_a_timer_not_only_with_results(capsys):
    few = trials(2, 1, 0)
    reporter = make_reporter(None, 1)
    reporter.on_step_end(0, few)  # a turn of the loop with no result: the block is shown
    assert capsys.readouterr().out.startswith("Trial status: 2 RUNNING | 1 TERMINATED")
    reporter.on_step_end(1, few)
    assert capsys.readouterr().out == ""  # at most one block per max_report_frequency
    reporter._last -= reporter.max_report_frequency  # that much time passed, still no result
    reporter.on_step_end(2, few)
    assert capsys.readouterr().out.startswith("Trial status: 2 RUNNING | 1 TERMINATED")


def test_add_metric_column_shows_it_under_its_name():
    few = trials(1, 1, 0)
    for t in few:
        t.update_metrics({**t.last_result, "custom_metric": 0.25})
    reporter = CLIReporter(max_progress_rows=10)
    reporter.add_metric_column("custom_metric", "custom")
    header = reporter.table(few).splitlines()[2].split()
    assert header[-2:] == ["(s)", "custom"]  # after iter and total time (s)
    with pytest.raises(ValueError, match="metric column 'custom_metric' is already shown"):
        reporter.add_metric_column("custom_metric")
