"""Ray 0.8's Tune schedulers, search algorithms and API reference (seed 002 §5.11-§5.13), run on
Ember with ``from ember import tune`` (and ``ember.tune...`` module paths) as the only change.

Names the reference uses without defining them are small stand-ins here: ``trainable`` /
``my_trainable`` / ``trainable_function`` report ``mean_accuracy``; ``my_func`` reports
``mean_loss`` of width/height/activation; ``MyTrainableClass`` is a class reporting
``episode_reward_mean`` that checkpoints its step. ``HOME`` and ``EMBER_RESULTS_DIR`` point
under tmp_path, so "~/ray_results/..." in a program finds what the run wrote. One node (4 CPUs)
is shared by the module.

Every snippet and whether it runs here:

- 5.11 ``tune.run(..., scheduler=X())`` one-liners: fragments (``...``), not programs.
- 5.11.1 PBT: the ``pbt = PopulationBasedTraining(...)`` program runs with 8 samples
  (``test_pbt``), and writes ``pbt_global.txt`` / ``pbt_policy_<id>.txt`` as the
  section says; its first snippet is a fragment.
- 5.11.2 ASHA: the scheduler as written runs (``test_asha_and_the_other_schedulers``).
- 5.11.3 HyperBand: ``HyperBand('time_total_s', ...)`` names a class that does not exist (a
  doc error); ``HyperBandScheduler()`` without a metric fails before any trial (as in Ray 2.x,
  where schedulers lost 0.8's default metric ``episode_reward_mean``); ``reward_attr=`` works.
- 5.11.4 BOHB, 5.12.3 BayesOpt, 5.12.5 SigOpt, 5.12.6 Nevergrad, 5.12.7 Scikit-Optimize,
  5.12.8 Dragonfly, 5.12.9 Ax, 5.12.10 BOHB, 5.12.11 ZOOpt: their libraries are not installed
  here: not run.
- 5.11.5 Median Stopping Rule: ``MedianStoppingRule()`` needs a metric (as above).
- 5.12.1 / 5.13.5 BasicVariantGenerator: ``tune.run(..., algo=searcher)`` is not an argument
  of tune.run in Ray 0.8 either (a doc error); the internal ``add_configurations`` API is a
  fragment (``{ ... }``). ``shuffle=`` is taken.
- 5.12.2 Repeater: its program uses BayesOpt (not installed); ``Repeater`` itself runs with
  HyperOpt in ``test_hyperopt_points_to_evaluate_and_repeater``.
- 5.12.4 HyperOpt: the ``points_to_evaluate`` program runs.
- 5.12.12 / 5.13.6 ``ExampleSearch``: uses an undefined ``Optimizer()``: not run.
- 5.13.6 ConcurrencyLimiter: ``HyperOptSearch(metric="accuracy")`` with no space: fails before
  any trial, naming what is missing (as Ray does).
- 5.13.1 tune.run examples, run_experiments (``Experiment`` and dict forms): run
  (``test_tune_run_and_run_experiments``). The ``Experiment(...)`` example has a syntax error
  (``local_dir "~/ray_results"``), as does the ``ExperimentAnalysis`` example.
- 5.13.1 ``TimeStopper``: reads ``self.deadline`` where it set ``self._deadline`` (a doc bug,
  AttributeError in Ray too) and runs 300 s: not run.
- 5.13.2 function and class APIs (printing the best config), ``StatusReporter``,
  ``register_trainable``, the ``Example`` save_to_object/restore_from_object doctest and
  ``validate_save_restore``: run (``test_trainable_apis``). ``track.log`` ``run_me`` sleeps
  100 s: not run. The PyTorch classes (``MyTrainableClass`` with ``torch.save``,
  ``PytorchTrainable``): not run.
- 5.13.3 Reporters: ``CustomReporter`` runs (``test_custom_reporter``); the ``CLIRunner`` /
  ``progress_runner`` snippets name things that never existed (doc errors).
- 5.13.4 Analysis: runs (``test_analysis``).
- 5.13.5 Grid/Random: the 4-, 6- and 9-config programs and the sampling program run
  (``test_grid_and_random_search``); ``grid_search([1, 2, 3])`` without ``tune.`` and
  ``[a, b, c]``/``tune.randn([0, 1, 2])`` do not run as written (NameError, TypeError in Ray
  0.8 too).
- 5.13.8 Loggers: ``trial_name_creator`` and ``loggers=DEFAULT_LOGGERS + (...)`` run
  (``test_trial_names_and_loggers``); Viskit and MLFlow: not installed.
- 5.13.9 internals (TrialRunner, TrialExecutor, Trial, Resources): reference only.
- 5.13.10 Tune Client API: runs (``test_tune_client``).
- 5.13.11 Tune CLI ``tune list-trials``: Ember's CLI is ``ember tune ls/lsx`` (tested with
  the Tune view), not this command.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from ember import tune
from tune_seed_fixtures import *  # noqa: F403 - the shared fixtures (clean_runtime, node, results)

pytestmark = pytest.mark.timeout(300)


# --- stand-ins for names the reference uses without defining them -----------------------
def trainable(config):
    for i in range(5):
        tune.track.log(mean_accuracy=(i + 1) / 5 * (1 + config.get("x", 0)))


def my_trainable(config):
    for i in range(20):
        tune.track.log(mean_accuracy=1 - 0.5 ** (i + 1), lr=config.get("lr"))


def my_func(config):
    width, height = config.get("width", 10), config.get("height", 0)
    penalty = 0 if config.get("activation") == "relu" else 10
    for step in range(5):
        tune.track.log(mean_loss=(0.1 + width * step / 100) ** -1 + abs(height) * 0.1 + penalty)


class MyTrainableClass(tune.Trainable):
    def _setup(self, config):
        self.timestep = 0

    def _train(self):
        self.timestep += 1
        v = np.tanh(float(self.timestep) / self.config.get("width", 1))
        v *= self.config.get("height", 1)
        return {"episode_reward_mean": v, "done": self.timestep >= 30}

    def _save(self, checkpoint_dir):
        path = os.path.join(checkpoint_dir, "checkpoint")
        with open(path, "w") as f:
            f.write(json.dumps({"timestep": self.timestep}))
        return path

    def _restore(self, checkpoint_path):
        with open(checkpoint_path) as f:
            self.timestep = json.loads(f.read())["timestep"]


def objective(x, a, b):
    return a * (x**0.5) + b


def test_pbt(node, results):
    """8 trials as the section writes it, time-multiplexed on 4 CPUs through their checkpoints
    (about 20 s here)."""
    import random

    from ember.tune.schedulers import PopulationBasedTraining

    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        metric="episode_reward_mean",
        mode="max",
        perturbation_interval=10,  # every 10 `time_attr` units
        # (training_iterations in this case)
        hyperparam_mutations={
            # Perturb factor1 by scaling it by 0.8 or 1.2. Resampling
            # resets it to a value sampled from the lambda function.
            "factor_1": lambda: random.uniform(0.0, 20.0),
            # Perturb factor2 by changing it to an adjacent value, e.g.
            # 10 -> 1 or 10 -> 100. Resampling will choose at random.
            "factor_2": [1, 10, 100, 1000, 10000],
        },
    )
    # (the program's `...`: the trainable and its starting config)
    config = {
        "width": tune.uniform(1, 20),
        "height": tune.uniform(1, 100),
        "factor_1": tune.uniform(0.0, 20.0),
        "factor_2": tune.choice([1, 10, 100, 1000, 10000]),
    }
    analysis = tune.run(MyTrainableClass, config=config, num_samples=8, scheduler=pbt)
    assert [t.last_result["training_iteration"] for t in analysis.trials] == [30] * 8
    perturbed = [p for t in analysis.trials for p in t.perturbations]
    assert perturbed, "no trial was perturbed in 30 iterations at an interval of 10"
    for p in perturbed:
        assert p["new_config"]["factor_2"] in [1, 10, 100, 1000, 10000]
        assert p["clone_from"] in {t.trial_id for t in analysis.trials}
    # [target tag, clone tag, target iteration, clone iteration, old config, new config]
    logged = [json.loads(x) for x in Path(analysis.experiment_path, "pbt_global.txt").open()]
    new_configs = [p["new_config"] for p in perturbed]
    assert logged and all(line[5] in new_configs for line in logged)
    assert {line[0] for line in logged} <= {t.experiment_tag for t in analysis.trials}
    # Every exploit is logged, those at a trial's last result too (it never starts again).
    assert len(logged) == len(perturbed)
    for moved in (t for t in analysis.trials if t.perturbations):
        policy = Path(analysis.experiment_path, f"pbt_policy_{moved.trial_id}.txt")
        assert json.loads(policy.read_text().splitlines()[-1])[0] == moved.experiment_tag


def test_asha_and_the_other_schedulers(node, results):
    from ember.tune.schedulers import AsyncHyperBandScheduler

    config = {"width": tune.uniform(1, 20), "height": tune.uniform(1, 100)}
    async_hb_scheduler = AsyncHyperBandScheduler(
        time_attr="training_iteration",
        metric="episode_reward_mean",
        mode="max",
        max_t=100,
        grace_period=10,
        reduction_factor=3,
        brackets=3,
    )
    analysis = tune.run(
        MyTrainableClass, config=config, num_samples=8, scheduler=async_hb_scheduler
    )
    assert all(t.status == "TERMINATED" for t in analysis.trials)
    assert all(10 <= t.last_result["training_iteration"] <= 30 for t in analysis.trials)

    from ember.tune.schedulers import HyperBandScheduler, MedianStoppingRule

    with pytest.raises(ValueError, match="HyperBandScheduler needs metric and mode"):
        tune.run(MyTrainableClass, scheduler=HyperBandScheduler())
    with pytest.raises(ValueError, match="MedianStoppingRule needs metric and mode"):
        tune.run(MyTrainableClass, scheduler=MedianStoppingRule())
    old = HyperBandScheduler(reward_attr="episode_reward_mean", max_t=600)
    assert (old.metric, old.mode) == ("episode_reward_mean", "max")


def test_hyperopt_points_to_evaluate_and_repeater(node, results):
    from ember.tune.suggest import Repeater
    from ember.tune.suggest.hyperopt import HyperOptSearch
    from hyperopt import hp

    space = {
        "width": hp.uniform("width", 0, 20),
        "height": hp.uniform("height", -100, 100),
        "activation": hp.choice("activation", ["relu", "tanh"]),
    }

    current_best_params = [
        {
            "width": 10,
            "height": 0,
            "activation": 0,  # The index of "relu"
        }
    ]

    algo = HyperOptSearch(
        space, metric="mean_loss", mode="min", points_to_evaluate=current_best_params
    )
    analysis = tune.run(my_func, search_alg=algo, num_samples=4)
    assert analysis.trials[0].config == {"width": 10, "height": 0, "activation": "relu"}
    assert all(0 <= t.config["width"] <= 20 for t in analysis.trials)

    searcher = HyperOptSearch(space, metric="mean_loss", mode="min")
    re_search_alg = Repeater(searcher, repeat=2)
    # Repeat 2 samples 2 times each.
    analysis = tune.run(my_func, num_samples=4, search_alg=re_search_alg)
    configs = [
        {k: v for k, v in t.config.items() if k != "__trial_index__"} for t in analysis.trials
    ]
    assert configs[0] == configs[1] and configs[2] == configs[3] and configs[0] != configs[2]
    assert [t.config["__trial_index__"] for t in analysis.trials] == [0, 1, 0, 1]

    from ember.tune.suggest import ConcurrencyLimiter

    search_alg = HyperOptSearch(metric="accuracy")
    search_alg = ConcurrencyLimiter(search_alg, max_concurrent=2)
    with pytest.raises(ValueError, match="search space"):
        tune.run(trainable, search_alg=search_alg)


def test_tune_run_and_run_experiments(node, results, capsys):
    # Run 10 trials (each trial is one instance of a Trainable). Tune runs
    # in parallel and automatically determines concurrency.
    ten = tune.run(trainable, num_samples=10)

    # Run 1 trial, stop when trial has reached 10 iterations
    one = tune.run(my_trainable, stop={"training_iteration": 10})

    # Run 1 trial, search over hyperparameters, stop after 10 iterations.
    space = {"lr": tune.uniform(0, 1), "momentum": tune.uniform(0, 1)}
    searched = tune.run(my_trainable, config=space, stop={"training_iteration": 10})
    assert len(ten.trials) == 10
    assert [t.last_result["training_iteration"] for t in one.trials + searched.trials] == [10, 10]
    assert 0 <= searched.trials[0].config["lr"] <= 1
    assert "Trial status: 1 TERMINATED" in capsys.readouterr().out  # verbose=2: the table

    from ember.tune import Experiment, run_experiments

    experiment_spec = Experiment("experiment", my_func)
    trials = run_experiments(experiments=experiment_spec)
    assert [t.last_result["training_iteration"] for t in trials] == [5]
    experiment_spec = {"experiment": {"run": my_func}}
    trials = run_experiments(experiments=experiment_spec)
    assert [t.status for t in trials] == ["TERMINATED"]
    assert Path(results, "experiment").is_dir()


def test_trainable_apis(node, results, capsys):
    # Function-based API
    def trainable(config):
        # config (dict): A dict of hyperparameters.

        for x in range(20):
            score = objective(x, config["a"], config["b"])

            tune.track.log(score=score)  # This sends the score to Tune.

    analysis = tune.run(trainable, config={"a": 2, "b": 4})

    print("best config: ", analysis.get_best_config(metric="score", mode="max"))
    assert "best config:  {'a': 2, 'b': 4}" in capsys.readouterr().out

    class Trainable(tune.Trainable):
        def _setup(self, config):
            # config (dict): A dict of hyperparameters
            self.x = 0
            self.a = config["a"]
            self.b = config["b"]

        def _train(self):  # This is called iteratively.
            score = objective(self.x, self.a, self.b)
            self.x += 1
            return {"score": score}

    analysis = tune.run(Trainable, stop={"training_iteration": 20}, config={"a": 2, "b": 4})
    print("best config: ", analysis.get_best_config(metric="score", mode="max"))
    assert "best config:  {'a': 2, 'b': 4}" in capsys.readouterr().out
    assert analysis.trials[0].last_result["score"] == pytest.approx(objective(19, 2, 4))

    from ember.tune.function_runner import StatusReporter

    def trainable_function(config, reporter):
        assert isinstance(reporter, StatusReporter)
        reporter(timesteps_this_iter=1)
        reporter(mean_accuracy=1, training_iteration=4)
        reporter(mean_accuracy=1, training_iteration=4, done=True)
        reporter(mean_accuracy=0)  # never reported: done=True ended the trial

    (trial,) = tune.run(trainable_function).trials
    assert trial.last_result["mean_accuracy"] == 1 and trial.last_result["done"] is True

    tune.register_trainable("lambda_id", lambda config: tune.track.log(value=config["v"]))
    (trial,) = tune.run("lambda_id", config={"v": 7}).trials
    assert trial.last_result["value"] == 7 and str(trial).startswith("lambda_id_")

    class Example(tune.Trainable):
        def _save(self, checkpoint_path):
            print(checkpoint_path)
            return os.path.join(checkpoint_path, "my/check/point")

        def _restore(self, checkpoint):
            print(checkpoint)

    capsys.readouterr()  # what the runs above printed
    trainer = Example()
    obj = trainer.save_to_object()  # This is used when PAUSED.
    trainer.restore_from_object(obj)  # Note the different prefix.
    saved_in, restored_from = capsys.readouterr().out.split()
    restored_prefix = restored_from[: -len("checkpoint_000000/my/check/point")]
    assert restored_from.endswith("/checkpoint_000000/my/check/point")
    assert not saved_in.startswith(restored_prefix)

    from ember.tune.utils import validate_save_restore

    # both of these should return
    assert validate_save_restore(MyTrainableClass)
    assert validate_save_restore(MyTrainableClass, use_object_store=True)


def test_custom_reporter(node, results, capsys):
    from ember.tune import ProgressReporter

    class CustomReporter(ProgressReporter):
        def should_report(self, trials, done=False):
            return True

        def report(self, trials, *sys_info):
            print(*sys_info)
            print("\n".join([str(trial) for trial in trials]))

    analysis = tune.run(trainable, num_samples=2, progress_reporter=CustomReporter())
    out = capsys.readouterr().out
    # report(trials, done, *sys_info): done, the scheduler, the logdir, then the trials.
    assert f"True Using FIFO scheduling algorithm. Result logdir: {analysis.experiment_path}" in out
    for trial in analysis.trials:
        assert str(trial) in out


def test_analysis(node, results):
    analysis = tune.run(
        trainable,
        name="example-experiment",
        num_samples=10,
    )
    # Get a dataframe for the last reported results of all of the trials
    df = analysis.dataframe()
    # Get a dataframe for the max accuracy seen for each trial
    df = analysis.dataframe(metric="mean_accuracy", mode="max")
    # Get a dict mapping {trial logdir -> dataframes} for all trials in the experiment.
    all_dataframes = analysis.trial_dataframes
    # Get a list of trials
    trials = analysis.trials
    assert len(df) == 10 and df["mean_accuracy"].tolist() == [1.0] * 10
    assert sorted(all_dataframes) == sorted(t.local_path for t in trials)
    assert all(len(frame) == 5 for frame in all_dataframes.values())

    from ember.tune import Analysis

    analysis = Analysis("~/ray_results/example-experiment")
    assert sorted(analysis.dataframe()["logdir"]) == sorted(t.local_path for t in trials)
    assert analysis.get_best_config("mean_accuracy") == {}
    assert analysis.get_best_logdir("mean_accuracy", mode="min") in all_dataframes
    assert len(analysis.get_all_configs()) == 10

    again = tune.ExperimentAnalysis(Path(results, "example-experiment"))
    assert sorted(t.trial_id for t in again.trials) == sorted(t.trial_id for t in trials)
    assert again.stats()["statuses"] == {"TERMINATED": 10}


def test_grid_and_random_search(node, results):
    def configs(analysis):
        return [t.config for t in analysis.trials]

    # 4 different configs.
    four = tune.run(trainable, config={"x": tune.grid_search([1, 2, 3, 4])}, num_samples=1)
    # 6 different configs.
    six = tune.run(trainable, config={"x": tune.grid_search([1, 2, 3])}, num_samples=2)
    assert [c["x"] for c in configs(four)] == [1, 2, 3, 4]
    assert [c["x"] for c in configs(six)] == [1, 2, 3, 1, 2, 3]

    sampled = tune.run(
        trainable,
        config={
            "param1": tune.choice([True, False]),
            "bar": tune.uniform(0, 10),
            "alpha": tune.sample_from(lambda _: np.random.uniform(100) ** 2),
            "const": "hello",  # It is also ok to specify constant values.
        },
    )
    (config,) = configs(sampled)
    assert config["param1"] in (True, False) and 0 <= config["bar"] <= 10
    assert 1 <= config["alpha"] <= 100**2 and config["const"] == "hello"

    nested = tune.run(
        my_trainable,
        name="my_trainable",
        config={
            "alpha": tune.sample_from(lambda spec: np.random.uniform(100)),
            "beta": tune.sample_from(lambda spec: spec.config.alpha * np.random.normal()),
            "nn_layers": [
                tune.grid_search([16, 64, 256]),
                tune.grid_search([16, 64, 256]),
            ],
        },
    )
    assert sorted(tuple(c["nn_layers"]) for c in configs(nested)) == sorted(
        (x, y) for x in (16, 64, 256) for y in (16, 64, 256)
    )
    assert all(1 <= c["alpha"] <= 100 and np.isfinite(c["beta"]) for c in configs(nested))


def test_trial_names_and_loggers(node, results):
    def trial_name_string(trial):
        """
        Args:
            trial (Trial): A generated trial object.

        Returns:
            trial_name (str): String representation of Trial.
        """
        return str(trial)

    analysis = tune.run(
        MyTrainableClass,
        name="example-experiment",
        num_samples=1,
        trial_name_creator=trial_name_string,
    )
    (trial,) = analysis.trials
    assert Path(trial.local_path).name.startswith(f"MyTrainableClass_{trial.trial_id}_")

    from ember.tune.logger import DEFAULT_LOGGERS, Logger

    class CustomLogger1(Logger):
        def _init(self):
            self.file = open(os.path.join(self.logdir, "custom1.txt"), "w")  # noqa: SIM115

        def on_result(self, result):
            self.file.write(f"{result['training_iteration']}\n")

        def close(self):
            self.file.close()

    class CustomLogger2(CustomLogger1):
        def _init(self):
            self.file = open(os.path.join(self.logdir, "custom2.txt"), "w")  # noqa: SIM115

    analysis = tune.run(
        MyTrainableClass,
        name="experiment_name",
        loggers=DEFAULT_LOGGERS + (CustomLogger1, CustomLogger2),
    )
    logdir = Path(analysis.trials[0].local_path)
    expected = "".join(f"{i}\n" for i in range(1, 31))
    assert (logdir / "custom1.txt").read_text() == expected
    assert (logdir / "custom2.txt").read_text() == expected


def test_tune_client(node, results):
    from ember.tune.web_server import TuneClient

    def slow(config):
        for i in range(600):
            time.sleep(0.1)
            tune.track.log(step=i, x=config["x"])

    out: dict = {}
    run = threading.Thread(
        target=lambda: out.setdefault(
            "analysis",
            tune.run(
                slow,
                config={"x": tune.grid_search([1, 2])},
                with_server=True,
                server_port=4321,
                verbose=0,
            ),
        )
    )
    run.start()
    try:
        client = TuneClient("localhost", 4321)
        deadline = time.monotonic() + 60
        while True:
            try:
                trials = client.get_all_trials(timeout=5)["trials"]
                if len(trials) == 2 and all(t["result"] for t in trials):
                    break
            except OSError:
                pass  # the server is not up yet
            assert time.monotonic() < deadline, "the Tune server never listed two trials"
            time.sleep(0.1)
        first = trials[0]["id"]
        assert client.get_trial(first)["trial"]["config"] == trials[0]["config"]
        client.stop_trial(first)
        client.add_trial("extra", {"config": {"x": 3}})
        while client.get_trial(first)["trial"]["status"] != "TERMINATED":
            assert time.monotonic() < deadline, "the stopped trial did not end"
            time.sleep(0.1)
        while not any(
            t["config"] == {"x": 3} and t["result"] for t in client.get_all_trials()["trials"]
        ):
            assert time.monotonic() < deadline, "the added trial did not run"
            time.sleep(0.1)
        client.stop_experiment()
        run.join(timeout=60)
        assert not run.is_alive()
    finally:
        if run.is_alive():
            try:
                TuneClient("localhost", 4321).stop_experiment()
            except OSError:
                pass
            run.join(timeout=60)
    trials = out["analysis"].trials
    assert sorted(t.config["x"] for t in trials) == [1, 2, 3]
    assert all(t.status == "TERMINATED" and t.last_result["step"] < 599 for t in trials)
