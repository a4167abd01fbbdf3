"""ember.tune's decisions as tables: schedulers, stoppers, checkpoint keeping and the trial
loop's state machine. Pure: no cluster, no files."""

from __future__ import annotations

from pathlib import Path

import pytest
from ember import tune
from ember.tune import checkpoint_manager
from ember.tune.config import CheckpointConfig
from ember.tune.loop import TrialLoop
from ember.tune.schedulers import (
    ASHAScheduler,
    AsyncHyperBandScheduler,
    FIFOScheduler,
    MedianStoppingRule,
    TrialScheduler,
)
from ember.tune.search import BasicVariantGenerator
from ember.tune.stopper import (
    CombinedStopper,
    MaximumIterationStopper,
    TimeoutStopper,
    TrialPlateauStopper,
    as_stopper,
)
from ember.tune.trial import Trial

C, P, S = TrialScheduler.CONTINUE, TrialScheduler.PAUSE, TrialScheduler.STOP


class Trials:
    """The loop's view as schedulers see it: the live trials."""

    def __init__(self, *trials: Trial) -> None:
        self.trials = list(trials)

    def live_trials(self) -> list[Trial]:
        return self.trials


def trial(tid: str, status: str = "RUNNING") -> Trial:
    return Trial(tid, {}, tid, "f", status=status)


def play(scheduler, view, rows):
    out = []
    for tid, t, score in rows:
        out.append(
            scheduler.on_trial_result(
                view,
                next(x for x in view.trials if x.trial_id == tid),
                {"training_iteration": t, "score": score},
            )
        )
    return out


def test_asha_stops_below_each_rungs_top_fraction():
    sched = ASHAScheduler(metric="score", mode="max", grace_period=1, reduction_factor=2, max_t=4)
    assert [m for m, _ in sched.brackets[0].rungs] == [4, 2, 1]
    view = Trials(trial("a"), trial("b"), trial("c"))
    for t in view.trials:
        sched.on_trial_add(view, t)
    rows = [
        ("a", 1, 10),  # first at rung 1: nothing to compare with
        ("b", 1, 5),  # below the median of [10]
        ("c", 1, 20),  # above the median of [10, 5]
        ("a", 2, 11),  # first at rung 2
        ("c", 2, 1),  # below [11]
        ("a", 3, 0),  # between rungs: continues whatever its score
        ("a", 4, 12),  # max_t reached
    ]
    assert play(sched, view, rows) == [C, S, C, C, S, C, S]
    assert sched.num_stopped == 3


def test_asha_min_mode_and_missing_metric():
    sched = AsyncHyperBandScheduler(
        metric="loss", mode="min", grace_period=1, reduction_factor=2, max_t=8
    )
    view = Trials(trial("a"), trial("b"))
    a, b = view.trials
    assert sched.on_trial_result(view, a, {"training_iteration": 1, "loss": 1.0}) == C
    assert sched.on_trial_result(view, b, {"training_iteration": 1, "loss": 2.0}) == S
    assert sched.on_trial_result(view, b, {"training_iteration": 2}) == C
    with pytest.raises(ValueError, match="reduction_factor"):
        ASHAScheduler(reduction_factor=1)
    assert ASHAScheduler().missing_properties() == ["metric", "mode"]


def test_median_stopping_compares_best_with_others_running_means():
    sched = MedianStoppingRule(
        time_attr="training_iteration",
        metric="score",
        mode="max",
        grace_period=1,
        min_samples_required=2,
    )
    view = Trials(trial("t1"), trial("t2"), trial("t3"), trial("t4"))
    rows = [
        ("t1", 1, 10),
        ("t1", 2, 10),
        ("t2", 1, 8),
        ("t2", 2, 8),
        ("t3", 1, 1),  # best 1 < median(10, 8) = 9
        ("t4", 1, 9.5),  # best 9.5 >= median(10, 8, 1) = 8
    ]
    assert play(sched, view, rows) == [C, C, C, C, S, C]


def test_median_stopping_yields_to_waiting_trials_when_it_cannot_judge():
    sched = MedianStoppingRule(
        time_attr="training_iteration", metric="score", mode="max", grace_period=0
    )
    alone = Trials(trial("a"))
    waiting = Trials(trial("b"), trial("w", status="PENDING"))
    assert play(sched, alone, [("a", 1, 1)]) == [C]
    assert play(sched, waiting, [("b", 1, 1)]) == [P]


def test_fifo_runs_pending_before_paused_in_order():
    view = Trials(
        trial("p1", "PAUSED"), trial("r", "RUNNING"), trial("n1", "PENDING"), trial("n2", "PENDING")
    )
    assert FIFOScheduler().choose_trial_to_run(view).trial_id == "n1"
    assert FIFOScheduler().choose_trial_to_run(Trials(trial("p", "PAUSED"))).trial_id == "p"


@pytest.mark.parametrize(
    "stop, results, expected",
    [
        (
            {"training_iteration": 3},
            [{"training_iteration": i} for i in (1, 2, 3)],
            [False, False, True],
        ),
        (
            {"acc": 0.9, "training_iteration": 10},
            [{"acc": 0.5, "training_iteration": 1}, {"acc": 0.95, "training_iteration": 2}],
            [False, True],
        ),
        (lambda tid, r: r["x"] < 0, [{"x": 1}, {"x": -1}], [False, True]),
        (MaximumIterationStopper(2), [{}, {}, {}], [False, True, True]),
        (
            TrialPlateauStopper("m", std=0.01, num_results=3, grace_period=3),
            [{"m": v} for v in (1, 5, 5, 5, 5)],
            [False, False, False, True, True],
        ),
        (
            TrialPlateauStopper(
                "m", num_results=2, grace_period=2, metric_threshold=1.0, mode="min"
            ),
            [{"m": v} for v in (3, 3, 0.5, 0.5)],
            [False, False, False, True],
        ),
        (
            CombinedStopper(MaximumIterationStopper(3), as_stopper({"v": 10})),
            [{"v": 1}, {"v": 11}, {"v": 1}],
            [False, True, True],
        ),
    ],
)
def test_stoppers(stop, results, expected):
    stopper = as_stopper(stop)
    assert [stopper("t", r) for r in results] == expected


def test_experiment_plateau_stops_everything_once_the_top_values_agree():
    from ember.tune.stopper import ExperimentPlateauStopper

    stopper = ExperimentPlateauStopper("loss", std=0.01, top=3, mode="min", patience=1)
    answers = [
        stopper(t, {"loss": v})
        for t, v in [("a", 5.0), ("b", 1.0), ("c", 1.0), ("a", 1.0), ("b", 1.0)]
    ]
    # top 3 are [1, 1, 1] from the 4th result on, which is the first plateaued one (Ray
    # counts it before comparing with patience)
    assert answers == [False, False, False, True, True] and stopper.stop_all()
    with pytest.raises(ValueError, match="top"):
        ExperimentPlateauStopper("loss", top=1)


def test_stop_dict_key_missing_from_result_is_named():
    with pytest.raises(ValueError, match="'accuracy' is not in the trial's result"):
        as_stopper({"accuracy": 1})("t", {"acc": 1})
    with pytest.raises(ValueError, match="must be a dict"):
        as_stopper(3)


def test_timeout_stopper_stops_everything_after_its_budget():
    import datetime

    stopper = TimeoutStopper(datetime.timedelta(seconds=0.05))
    assert stopper.stop_all() is False
    import time

    time.sleep(0.06)
    assert stopper.stop_all() is True and stopper("t", {}) is False
    with pytest.raises(ValueError):
        TimeoutStopper(0)


def test_checkpoint_keeping_by_score_and_by_age():
    by_score = CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="acc")
    kept, drop = [], []
    for i, acc in enumerate([0.5, 0.9, 0.1, 0.7]):
        kept, d = checkpoint_manager.register(kept, f"checkpoint_{i:06d}", {"acc": acc}, by_score)
        drop += d
    # the newest is always kept (a restart resumes from it), then the best of the rest
    assert [k[0] for k in kept] == ["checkpoint_000001", "checkpoint_000003"]
    assert drop == ["checkpoint_000000", "checkpoint_000002"]
    by_age = CheckpointConfig(num_to_keep=1)
    kept = []
    for i in range(3):
        kept, d = checkpoint_manager.register(kept, f"checkpoint_{i:06d}", {}, by_age)
    assert kept == [["checkpoint_000002", None]] and d == ["checkpoint_000001"]


def make_loop(space, **kw) -> TrialLoop:
    search = BasicVariantGenerator()
    search.set_search_properties(None, None, space, kw.pop("num_samples", 1))
    return TrialLoop(
        search,
        kw.pop("scheduler", FIFOScheduler()),
        as_stopper(kw.pop("stop", None)),
        "train",
        kw.pop("max_running", 2),
        **kw,
    )


def kinds(actions):
    return [(a.kind, a.trial.trial_id[-1], a.arg) for a in actions]


def test_loop_starts_up_to_its_slots_and_stops_on_the_stop_dict():
    loop = make_loop({"x": tune.grid_search([1, 2, 3])}, stop={"training_iteration": 2})
    assert kinds(loop.step(0)) == [
        ("start", "0", None),
        ("train", "0", None),
        ("start", "1", None),
        ("train", "1", None),
    ]
    t0 = loop.trials[0].trial_id
    r1 = {"training_iteration": 1, "score": 1}
    assert kinds(loop.on_result(t0, r1)) == [("train", "0", None)]
    r2 = {"training_iteration": 2, "score": 2}
    assert kinds(loop.on_result(t0, r2)) == [("stop", "0", "TERMINATED")]
    assert r2["done"] is True and loop.trials[0].metric_analysis["score"] == {
        "last": 2,
        "min": 1,
        "max": 2,
    }
    assert kinds(loop.step(1)) == [("start", "2", None), ("train", "2", None)]
    # a function that returns ends its trial TERMINATED too
    assert kinds(loop.on_result(loop.trials[1].trial_id, {"__done__": True})) == [
        ("stop", "1", "TERMINATED")
    ]
    assert not loop.finished
    assert kinds(loop.on_result(loop.trials[2].trial_id, {"__done__": True})) == [
        ("stop", "2", "TERMINATED")
    ]
    assert loop.finished and [t.status for t in loop.trials] == ["TERMINATED"] * 3


def test_a_result_that_ends_its_trial_is_not_shown_to_the_scheduler_or_searcher():
    """As in Ray: the stop criteria (or ``done``) decide first, and the scheduler and the
    searcher hear only of results after which the trial goes on. A PBT once exploited a
    trial at its last result: the finished trial showed a config it never ran."""

    class Watching(FIFOScheduler):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[int] = []

        def on_trial_result(self, view, trial, result):
            self.seen.append(result["training_iteration"])
            return C

    watching = Watching()
    loop = make_loop({"x": 1}, stop={"training_iteration": 2}, scheduler=watching)
    searched: list[int] = []
    real = loop.search_alg.on_trial_result
    loop.search_alg.on_trial_result = lambda tid, r: (
        searched.append(r["training_iteration"]),
        real(tid, r),
    )
    loop.step(0)
    tid = loop.trials[0].trial_id
    assert kinds(loop.on_result(tid, {"training_iteration": 1})) == [("train", "0", None)]
    assert kinds(loop.on_result(tid, {"training_iteration": 2})) == [("stop", "0", "TERMINATED")]
    assert watching.seen == [1] and searched == [1]
    assert loop.trials[0].config == {"x": 1}


def test_loop_restarts_a_failed_trial_max_failures_times_then_errors():
    loop = make_loop({"x": 1}, max_failures=1)
    loop.step(0)
    tid = loop.trials[0].trial_id
    assert kinds(loop.on_error(tid, "boom")) == [("stop", "0", "PENDING")]
    assert kinds(loop.step(1)) == [("start", "0", None), ("train", "0", None)]
    assert loop.trials[0].runs == 2
    assert kinds(loop.on_error(tid, "boom again")) == [("stop", "0", "ERROR")]
    assert loop.finished and loop.trials[0].error_msg == "boom again"


def test_loop_checkpoints_class_trainables_and_keeps_num_to_keep():
    loop = make_loop(
        {"x": 1},
        is_function=False,
        checkpoint_config=CheckpointConfig(
            num_to_keep=1, checkpoint_frequency=2, checkpoint_at_end=True
        ),
        stop={"training_iteration": 3},
    )
    loop.step(0)
    tid = loop.trials[0].trial_id
    assert kinds(loop.on_result(tid, {"training_iteration": 1})) == [("train", "0", None)]
    assert kinds(loop.on_result(tid, {"training_iteration": 2})) == [("save", "0", None)]
    assert kinds(loop.on_saved(tid, "checkpoint_000000")) == [("train", "0", None)]
    assert kinds(loop.on_result(tid, {"training_iteration": 3})) == [("save", "0", None)]
    assert kinds(loop.on_saved(tid, "checkpoint_000001")) == [
        ("delete_checkpoint", "0", "checkpoint_000000"),
        ("stop", "0", "TERMINATED"),
    ]
    assert loop.trials[0].latest_checkpoint == "checkpoint_000001"
    assert loop.trials[0].checkpoint_iteration == 3


def test_loop_time_budget_stops_running_trials_and_starts_no_more():
    loop = make_loop({"x": tune.grid_search([1, 2, 3])}, max_running=1, time_budget_s=10)
    loop.step(0)
    assert kinds(loop.step(10)) == [("stop", "0", "TERMINATED")]
    assert loop.finished and [t.status for t in loop.trials] == ["TERMINATED", "PENDING", "PENDING"]


def test_loop_pause_then_resume_through_the_scheduler():
    class PauseOnce(FIFOScheduler):
        def on_trial_result(self, view, trial, result):
            return P if result["training_iteration"] == 1 else C

    loop = make_loop({"x": tune.grid_search([1, 2])}, max_running=1, scheduler=PauseOnce())
    loop.step(0)
    t0, t1 = (t.trial_id for t in loop.trials)
    assert kinds(loop.on_result(t0, {"training_iteration": 1})) == [("stop", "0", "PAUSED")]
    assert kinds(loop.step(1)) == [("start", "1", None), ("train", "1", None)]
    loop.on_result(t1, {"__done__": True})
    assert kinds(loop.step(2)) == [("start", "0", None), ("train", "0", None)]


def test_a_class_trial_pausing_is_not_started_again_before_its_save_lands():
    """The CI hang: a paused trial restarted while its save was in flight got a second actor,
    the save's answer (of the old run) was dropped, and the experiment never finished."""

    class PauseOnce(FIFOScheduler):
        def on_trial_result(self, view, trial, result):
            return P if result["training_iteration"] == 1 else C

    loop = make_loop({"x": 1}, max_running=1, scheduler=PauseOnce(), is_function=False)
    loop.step(0)
    [t0] = loop.trials
    assert kinds(loop.on_result(t0.trial_id, {"training_iteration": 1})) == [("save", "0", None)]
    assert t0.status == "RUNNING" and loop.awaits_save(t0.trial_id)
    assert loop.step(1) == [] and t0.runs == 1  # its slot is still taken
    assert kinds(loop.on_saved(t0.trial_id, "checkpoint_000000")) == [("stop", "0", "PAUSED")]
    assert t0.status == "PAUSED" and not loop.awaits_save(t0.trial_id)
    assert kinds(loop.step(2)) == [("start", "0", None), ("train", "0", None)]
    assert t0.runs == 2


def test_a_pause_cut_short_leaves_nothing_waiting():
    class PauseAtOne(FIFOScheduler):
        def on_trial_result(self, view, trial, result):
            return P if result["training_iteration"] == 1 else C

    # the time budget ends the experiment while the pause's save is in flight
    loop = make_loop(
        {"x": 1}, max_running=1, scheduler=PauseAtOne(), is_function=False, time_budget_s=5
    )
    loop.step(0)
    [t0] = loop.trials
    loop.on_result(t0.trial_id, {"training_iteration": 1})
    assert kinds(loop.step(5)) == [("stop", "0", "TERMINATED")]
    assert loop.finished
    # its save then fails (the actor was ended): nothing to do, still finished
    assert loop.on_error(t0.trial_id, "actor died") == [] and loop.finished
    # a trial ended with checkpoint_at_end whose last save fails is still released
    loop = make_loop(
        {"x": 1},
        is_function=False,
        checkpoint_config=CheckpointConfig(checkpoint_at_end=True),
        stop={"training_iteration": 1},
    )
    loop.step(0)
    [t0] = loop.trials
    assert kinds(loop.on_result(t0.trial_id, {"training_iteration": 1})) == [("save", "0", None)]
    assert not loop.finished
    assert kinds(loop.on_error(t0.trial_id, "disk full")) == [("stop", "0", "TERMINATED")]
    assert loop.finished


def test_pbt_moves_the_worst_trial_onto_a_top_trials_checkpoint(tmp_path):
    from ember.tune.schedulers import PopulationBasedTraining

    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        metric="score",
        mode="max",
        perturbation_interval=2,
        hyperparam_mutations={"lr": [0.1, 0.2, 0.3, 0.4]},
        resample_probability=0,
        seed=1,
    )
    trials = []
    for i, lr in enumerate([0.1, 0.2, 0.3, 0.4]):
        t = Trial(f"t{i}", {"lr": lr, "fixed": "k"}, str(i), "f", status="RUNNING")
        t.experiment_dir, t.dirname, t.latest_checkpoint = (
            str(tmp_path),
            f"d{i}",
            "checkpoint_000000",
        )
        t.checkpoint_iteration = 2
        (tmp_path / f"d{i}" / "checkpoint_000000").mkdir(parents=True)
        trials.append(t)
    view = Trials(*trials)
    for t in trials:
        pbt.on_trial_add(view, t)
    # iteration 1: before the interval, nothing moves
    assert [
        pbt.on_trial_result(view, t, {"training_iteration": 1, "score": t.config["lr"]})
        for t in trials
    ] == [C, C, C, C]
    # iteration 2: t3 (best) is in the top quarter, t0 (worst) in the bottom one
    decisions = [
        pbt.on_trial_result(view, t, {"training_iteration": 2, "score": t.config["lr"]})
        for t in reversed(trials)
    ]
    assert decisions == [C, C, C, P]
    worst = trials[0]
    assert worst.restore_path == str(tmp_path / "d3" / "checkpoint_000000")
    assert worst.restore_iteration == 2
    # explore: the donor's lr shifted one place in the list; other keys copied from the donor
    assert worst.config in ({"lr": 0.3, "fixed": "k"}, {"lr": 0.4, "fixed": "k"})
    [record] = worst.perturbations
    assert record["clone_from"] == "t3" and record["old_config"] == {"lr": 0.1, "fixed": "k"}
    assert record["operations"]["lr"].startswith("shift")
    with pytest.raises(ValueError, match="needs"):
        pbt.on_trial_result(view, trials[1], {"score": 1})


def test_hyperband_pauses_at_the_milestone_then_keeps_the_best_third():
    from ember.tune.schedulers import HyperBandScheduler

    hb = HyperBandScheduler(metric="score", mode="max", max_t=9, reduction_factor=3)
    loop = make_loop(
        {"x": tune.grid_search(list(range(8)))}, scheduler=hb, max_running=8, is_function=False
    )
    assert len(loop.step(0)) == 16
    # as in Ray: the first bracket (s=0) takes 3 trials to max_t; the next (s=1) 5 trials,
    # milestone 3
    assert [len(b.trials) for b in hb.bands[0]] == [3, 5]
    second = loop.trials[3:]

    def result(trial, t):
        return loop.on_result(trial.trial_id, {"training_iteration": t, "score": trial.config["x"]})

    for trial in second:
        assert kinds(result(trial, 1)) == [("train", trial.trial_id[-1], None)]
    for trial in second[1:4]:  # at the milestone before the others: they pause (saving first)
        assert kinds(result(trial, 3)) == [("save", trial.trial_id[-1], None)]
    for trial in second[1:3]:
        assert kinds(loop.on_saved(trial.trial_id, "checkpoint_000000")) == [
            ("stop", trial.trial_id[-1], "PAUSED")
        ]
    # x = 3's and x = 6's saves are still in flight (RUNNING, stop requested) when the last
    # arrives
    assert kinds(result(second[0], 3)) == [("save", "3", None)]
    # the last arrives: the bracket halves to ceil(5/3) = 2 (x = 6, 7) with milestone 9
    actions = kinds(result(second[4], 3))
    assert actions == [
        ("train", "7", None),
        ("stop", "3", "TERMINATED"),
        ("stop", "4", "TERMINATED"),
        ("stop", "5", "TERMINATED"),
    ]
    assert [t.status for t in second] == ["TERMINATED"] * 3 + ["RUNNING", "RUNNING"]
    # x = 3, halved away while saving, stays ended when its save lands
    assert loop.on_saved(second[0].trial_id, "checkpoint_000000") == []
    assert second[0].status == "TERMINATED"
    assert loop.step(1) == []  # x = 6 is still saving: not started a second time
    assert kinds(loop.on_saved(second[3].trial_id, "checkpoint_000000")) == [
        ("stop", "6", "PAUSED")
    ]
    # the paused good trial resumes (from its checkpoint) when the loop looks for work
    assert kinds(loop.step(1)) == [("start", "6", None), ("train", "6", None)]
    assert hb.num_stopped == 3


def test_resources_in_every_spelling_ray_takes():
    from ember.tune.resources import as_resources

    assert as_resources(None).bundles == [{"CPU": 1.0}]
    assert as_resources({"cpu": 2, "gpu": 0}).bundles == [{"CPU": 2.0}]
    assert as_resources({"cpu": 1, "extra_cpu": 2}).bundles == [{"CPU": 1.0}, {"CPU": 2.0}]
    assert as_resources({"cpu": 1, "custom_resources": {"tpu": 1}}).bundles == [
        {"CPU": 1.0, "tpu": 1.0}
    ]
    pgf = tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 2, "GPU": 1}], strategy="SPREAD")
    assert pgf.required_resources() == {"CPU": 3.0, "GPU": 1.0} and as_resources(pgf) is pgf
    with pytest.raises(ValueError, match="unknown keys \\['cpus'\\]"):
        as_resources({"cpus": 1})
    with pytest.raises(ValueError, match="bundle 0"):
        tune.PlacementGroupFactory([{"CPU": -1}])
    marked = tune.with_resources(lambda config: None, {"cpu": 3})
    from ember.tune.tuner import trainable_resources

    assert trainable_resources(marked).bundles == [{"CPU": 3.0}]


def test_storage_path_defaults_and_settings_checks(monkeypatch, tmp_path):
    from ember.tune.config import default_storage_path

    monkeypatch.delenv("EMBER_RESULTS_DIR", raising=False)
    assert default_storage_path() == str(Path("~/ember_results").expanduser())
    monkeypatch.setenv("EMBER_RESULTS_DIR", str(tmp_path))
    assert default_storage_path() == str(tmp_path)
    with pytest.raises(ValueError, match="num_samples"):
        tune.TuneConfig(num_samples=0)
    with pytest.raises(ValueError, match="max_failures"):
        tune.FailureConfig(max_failures=-2)
    with pytest.raises(ValueError, match="num_to_keep"):
        tune.CheckpointConfig(num_to_keep=0)
    with pytest.raises(ValueError, match="plain directory name"):
        tune.RunConfig(name="a/b")


def test_reporting_outside_a_trial_says_where_it_belongs():
    with pytest.raises(RuntimeError, match=r"tune.report\(\) is called from inside a trial"):
        tune.report({"x": 1})
    with pytest.raises(TypeError, match="dict of metrics"):
        tune.report(3)
    assert tune.get_checkpoint.__module__ == "ember.tune.trainable.session"


def test_default_experiment_names_started_in_one_second_do_not_collide(tmp_path):
    from ember.tune.files import unused_name

    names = [unused_name(tmp_path, "train_2026-11-28_19-31-51") for _ in range(3)]
    assert names == [
        "train_2026-11-28_19-31-51",
        "train_2026-11-28_19-31-51_2",
        "train_2026-11-28_19-31-51_3",
    ]
    assert all((tmp_path / n).is_dir() for n in names)
