"""OptunaSearch and HyperOptSearch search for real (the libraries' TPE, not Ember's code): on a
1-D quadratic each finds a better best than random search with the same seed and budget;
points_to_evaluate come first; save/restore carries the study; a space they cannot search gets
Ray's error before any trial starts. One local node (2 CPUs) for the module."""

from __future__ import annotations

import importlib.util

import ember
import pytest
from ember import tune
from ember.tune.search import BasicVariantGenerator
from ember.tune.search.hyperopt import HyperOptSearch
from ember.tune.search.optuna import OptunaSearch

# Not imported here: each trial's worker imports this module to find the trainable, and
# Optuna and HyperOpt (SciPy, NetworkX) take seconds to import. The searchers import them.
pytestmark = pytest.mark.skipif(
    not (importlib.util.find_spec("optuna") and importlib.util.find_spec("hyperopt")),
    reason="pip install 'ember[optuna,hyperopt]' (both are in the test extra)",
)

SEED, BUDGET = 7, 24


@pytest.fixture(scope="module")
def node(_module_node_cleanup):
    if ember.is_initialized():
        ember.shutdown()
    return ember.init(num_cpus=2)


def quadratic(config):
    tune.report({"loss": (config["x"] - 3.0) ** 2, "width": config["width"]})


def best_loss(tmp_path, name, search_alg, points=None):
    grid = tune.Tuner(
        quadratic,
        param_space={"x": tune.uniform(-10, 10), "width": 4},
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            num_samples=BUDGET,
            search_alg=search_alg,
            max_concurrent_trials=1,  # each suggestion knows every earlier result
            reuse_actors=True,  # one actor serves every trial: seconds, not a minute
        ),
        run_config=tune.RunConfig(name=name, storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert len(grid) == BUDGET and grid.num_terminated == BUDGET
    assert {r.config["width"] for r in grid} == {4}  # the space's constants reach the trial
    return grid, grid.get_best_result().metrics["loss"]


def test_optuna_and_hyperopt_beat_random_search_on_a_quadratic(node, tmp_path):
    _, random_best = best_loss(tmp_path, "random", BasicVariantGenerator(random_state=SEED))
    grid, optuna_best = best_loss(tmp_path, "optuna", OptunaSearch(seed=SEED))
    assert optuna_best < random_best, (optuna_best, random_best)
    grid, hyperopt_best = best_loss(
        tmp_path, "hyperopt", HyperOptSearch(random_state_seed=SEED, n_initial_points=8)
    )
    assert hyperopt_best < random_best, (hyperopt_best, random_best)
    print(
        f"best loss: random {random_best:.4g}, optuna {optuna_best:.4g}, hyperopt {hyperopt_best:.4g}"
    )


def test_points_to_evaluate_come_first_and_save_restore_carries_the_study(node, tmp_path):
    points = [{"x": 3.0}, {"x": -1.0}]
    for searcher in (
        OptunaSearch(points_to_evaluate=points, seed=SEED),
        HyperOptSearch(points_to_evaluate=points, random_state_seed=SEED),
    ):
        grid = tune.Tuner(
            quadratic,
            param_space={"x": tune.uniform(-10, 10), "width": 1},
            tune_config=tune.TuneConfig(
                metric="loss",
                mode="min",
                num_samples=4,
                search_alg=searcher,
                max_concurrent_trials=1,
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                name=type(searcher).__name__, storage_path=str(tmp_path), verbose=0
            ),
        ).fit()
        assert [r.config["x"] for r in grid][:2] == [3.0, -1.0]
        assert grid.get_best_result().metrics["loss"] == 0.0
        # The searcher as saved knows the 4 finished trials; a restored copy continues.
        saved = tmp_path / f"{type(searcher).__name__}.pkl"
        searcher.save(str(saved))
        fresh = type(searcher)(metric="loss", mode="min")
        fresh.restore(str(saved))
        if isinstance(fresh, OptunaSearch):
            assert len(fresh._study.trials) == 4
            assert fresh._study.best_value == 0.0
        else:
            assert len(fresh._trials.trials) == 4
            assert min(fresh._trials.losses()) == 0.0
        assert isinstance(fresh.suggest("next")["x"], float)


@pytest.mark.parametrize(
    ("searcher", "space", "message"),
    [
        (OptunaSearch, {"x": tune.grid_search([1, 2])},
         "Grid search parameters cannot be automatically converted to an Optuna search space."),
        (HyperOptSearch, {"x": tune.grid_search([1, 2])},
         "Grid search parameters cannot be automatically converted to a HyperOpt search space."),
        (OptunaSearch, {"x": tune.randn(0, 1)},
         "Optuna search does not support parameters of type `Float` with samplers of type `_Normal`"),
        (OptunaSearch, {"x": tune.sample_from(lambda _: 1)},
         "Optuna search does not support parameters of type `Function` with samplers of type `NoneType`"),
        (HyperOptSearch, {"x": tune.sample_from(lambda _: 1)},
         "HyperOpt does not support parameters of type `Function` with samplers of type `NoneType`"),
    ],
)  # fmt: skip
def test_a_space_the_library_cannot_search_fails_before_any_trial(
    node, tmp_path, searcher, space, message
):
    with pytest.raises(ValueError) as raised:
        tune.Tuner(
            quadratic,
            param_space=space,
            tune_config=tune.TuneConfig(metric="loss", mode="min", search_alg=searcher()),
            run_config=tune.RunConfig(name="bad", storage_path=str(tmp_path), verbose=0),
        ).fit()
    assert str(raised.value) == message
    assert not (tmp_path / "bad").exists()


def test_a_searcher_without_metric_or_space_says_so_before_any_trial(node, tmp_path):
    def fit(searcher, space):
        return tune.Tuner(
            quadratic,
            param_space=space,
            tune_config=tune.TuneConfig(search_alg=searcher),
            run_config=tune.RunConfig(name="none", storage_path=str(tmp_path), verbose=0),
        ).fit()

    with pytest.raises(ValueError, match=r"the `metric` \(None\) or `mode` \(None\) parameters"):
        fit(OptunaSearch(), {"x": tune.uniform(0, 1)})
    with pytest.raises(ValueError, match="no search space has been defined.*constant variables"):
        fit(HyperOptSearch(metric="loss", mode="min"), {"x": 1})
    with pytest.raises(ValueError, match="already instantiated with a search space"):
        fit(
            OptunaSearch({"x": tune.uniform(0, 1)}, metric="loss", mode="min"),
            {"y": tune.uniform(0, 1)},
        )
    assert not (tmp_path / "none").exists()


KILLED_DRIVER = """
import sys, time
import ember
from ember import tune
from ember.tune.search.hyperopt import HyperOptSearch
from ember.tune.search.optuna import OptunaSearch

def slowly(config):
    time.sleep(0.3)
    tune.report({"loss": (config["x"] - 3.0) ** 2})

ember.init(address=sys.argv[1])
searcher = OptunaSearch(seed=7) if sys.argv[3] == "optuna" else HyperOptSearch(
    random_state_seed=7, n_initial_points=2)
tune.Tuner(
    slowly,
    param_space={"x": tune.uniform(-10, 10)},
    tune_config=tune.TuneConfig(
        metric="loss", mode="min", num_samples=6, search_alg=searcher, max_concurrent_trials=1
    ),
    run_config=tune.RunConfig(name="killed", storage_path=sys.argv[2], verbose=0),
).fit()
"""


def slowly(config):
    import time

    time.sleep(0.3)
    tune.report({"loss": (config["x"] - 3.0) ** 2})


@pytest.mark.parametrize("library", ["optuna", "hyperopt", "optuna, state lost"])
def test_a_restored_searcher_goes_on_from_its_saved_state(node, tmp_path, library):
    """The driver is SIGKILLed after three trials; Tuner.restore's searcher is the saved one
    (its study knows those trials and their losses), so it asks for three more, not six.
    With its state file gone, a fresh searcher makes the rest (and nothing waits forever)."""
    import json
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = tmp_path / "driver.py"
    script.write_text(KILLED_DRIVER)
    address = node["address"]
    lost = library.endswith("state lost")
    library = library.split(",")[0]
    proc = subprocess.Popen([sys.executable, str(script), address, str(tmp_path), library])
    experiment = tmp_path / "killed"
    deadline = time.monotonic() + 120
    done: list = []
    try:
        while time.monotonic() < deadline and len(done) < 3:
            state = next(experiment.glob("experiment_state-*.json"), None)
            if state is not None and (experiment / "searcher-state.pkl").exists():
                trials = json.loads(state.read_text())["trials"]
                done = [t for t in trials if t["status"] == "TERMINATED"]
            time.sleep(0.05)
        assert len(done) >= 3, "the driver did not finish three trials in time"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    before = {t["trial_id"]: t["config"]["x"] for t in done}
    if lost:
        (experiment / "searcher-state.pkl").unlink()

    tuner = tune.Tuner.restore(str(experiment), trainable=slowly)
    grid = tuner.fit()
    assert len(grid) == 6 and grid.num_terminated == 6
    assert {r.trial_id: r.config["x"] for r in grid if r.trial_id in before} == before
    if lost:
        return
    searcher = tuner.tune_config.search_alg
    losses = sorted(r.metrics["loss"] for r in grid)
    if library == "optuna":
        told = [t for t in searcher._study.trials if t.value is not None]
        assert len(searcher._study.trials) == 6  # the killed run's three, then three more
        assert sorted(t.value for t in told) == pytest.approx(losses)
    else:
        docs = searcher._trials.trials
        assert len(docs) == 6
        assert sorted(d["result"]["loss"] for d in docs) == pytest.approx(losses)
    assert Path(experiment, "search_gen_state.json").exists()
