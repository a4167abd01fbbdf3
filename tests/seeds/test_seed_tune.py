"""Ray 0.8's documentation, "Tune: Scalable Hyperparameter Tuning" (§5.9), the 60-second
tutorial: the objective, a function trainable reporting with ``tune.track.log``, a class
trainable with 0.8's ``_setup``/``_train``, ``tune.run`` with a search space and
``num_samples``, the HyperBand scheduler on the class, HyperOpt through
``ray.tune.suggest.hyperopt``, and the analysis (best config, dataframe).

The programs are the document's, with ``from ember import tune`` as the change and the small
fixes the document needs to run at all: its HyperOpt snippet imports ``hyperopt as hp`` where
HyperOpt's space module is ``hyperopt.hp``, and its ``trainable``/``my_trainable`` are the
tutorial's function; its class gains ``_save``/``_restore`` as the document's class API shows
them, since HyperBand pauses trials through checkpoints. The quick start itself needs PyTorch
(not installed here)."""

# The document's programs are kept as written, old spellings included.
# ruff: noqa: N801

from __future__ import annotations

import os

import ember as ray
import pytest
from ember import tune

pytestmark = [pytest.mark.timeout(240), pytest.mark.ray_init(num_cpus=2)]


def objective(x, a, b):
    return a * (x**0.5) + b


def trainable(config):
    # config (dict): A dict of hyperparameters.

    for x in range(20):
        score = objective(x, config["a"], config["b"])

        tune.track.log(score=score)  # This sends the score to Tune.


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

    # Checkpointing and pausing, as the document's class API shows them (HyperBand pauses
    # trials through their checkpoints): _save returns the file it wrote, _restore reads it.
    def _save(self, checkpoint_dir):
        checkpoint_path = os.path.join(checkpoint_dir, "x.txt")
        with open(checkpoint_path, "w") as f:
            f.write(str(self.x))
        return checkpoint_path

    def _restore(self, checkpoint_path):
        with open(checkpoint_path) as f:
            self.x = int(f.read())


def test_the_function_trainable_and_the_analysis(ray_start, tmp_path) -> None:
    space = {"a": tune.uniform(0, 1), "b": tune.uniform(0, 1)}
    analysis = tune.run(trainable, config=space, num_samples=4, local_dir=str(tmp_path), verbose=0)

    # Get the best hyperparameters
    best_hyperparameters = analysis.get_best_config(metric="score", mode="max")
    # Get a dataframe for the max score seen for each trial
    df = analysis.dataframe(metric="score", mode="max")

    assert len(df) == 4
    # The best score is the largest a * sqrt(19) + b among the trials, and its config is the
    # one the analysis names.
    best = max(objective(19, t.config["a"], t.config["b"]) for t in analysis.trials)
    assert df["score"].max() == pytest.approx(best)
    assert objective(19, **best_hyperparameters) == pytest.approx(best)
    assert all(t.last_result["training_iteration"] == 20 for t in analysis.trials)


def test_the_class_trainable_with_hyperband(ray_start, tmp_path) -> None:
    from ember.tune.schedulers import HyperBandScheduler

    # Create HyperBand scheduler and maximize score
    hyperband = HyperBandScheduler(metric="score", mode="max", max_t=20)

    # Execute 20 trials using HyperBand using a search space
    configs = {"a": tune.uniform(0, 1), "b": tune.uniform(0, 1)}

    analysis = tune.run(
        Trainable,
        config=configs,
        num_samples=6,
        scheduler=hyperband,
        stop={"training_iteration": 20},
        local_dir=str(tmp_path),
        verbose=0,
    )
    iterations = [t.last_result["training_iteration"] for t in analysis.trials]
    assert len(iterations) == 6 and max(iterations) == 20
    for t in analysis.trials:  # _train's scores, step by step, as the class computed them
        n = t.last_result["training_iteration"]
        assert t.last_result["score"] == pytest.approx(
            objective(n - 1, t.config["a"], t.config["b"])
        )


def test_hyperopt_through_tune_suggest(ray_start, tmp_path) -> None:
    from ember.tune.suggest.hyperopt import HyperOptSearch
    from hyperopt import hp

    # Create a HyperOpt search space
    space = {
        "a": hp.uniform("a", 0, 1),
        "b": hp.uniform("b", 0, 20),
        # Note: Arbitrary HyperOpt search spaces should be supported!
        # "foo": hp.lognormal("foo", 0, 1))
    }

    # Specify the search space and maximize score
    hyperopt = HyperOptSearch(space, metric="score", mode="max")

    # Execute 20 trials using HyperOpt and stop after 20 iterations
    analysis = tune.run(
        trainable,
        search_alg=hyperopt,
        num_samples=8,
        stop={"training_iteration": 20},
        local_dir=str(tmp_path),
        verbose=0,
    )
    assert len(analysis.trials) == 8
    for t in analysis.trials:
        assert 0 <= t.config["a"] <= 1 and 0 <= t.config["b"] <= 20
        assert t.last_result["training_iteration"] == 20
    assert ray.is_initialized()
