"""A function trainable's results taken many per round trip (FIFO, ASHA, median stopping):
every result reaches the files in order, a result with a checkpoint still waits for the
loop, and a stop drops what the function reported past it. One local node for the module."""

from __future__ import annotations

import tempfile

from ember import tune
from ember.tune.schedulers import ASHAScheduler


def fast(config):
    for i in range(config["n"]):
        checkpoint = None
        if config["every"] and i % config["every"] == config["every"] - 1:
            d = tempfile.mkdtemp()
            with open(f"{d}/step.txt", "w") as f:
                f.write(str(i))
            checkpoint = tune.Checkpoint.from_directory(d)
        tune.report({"i": i, "score": config["slope"] * i}, checkpoint=checkpoint)


def _fit(space, **tune_config):
    return tune.Tuner(
        fast,
        param_space=space,
        tune_config=tune.TuneConfig(**tune_config),
        run_config=tune.RunConfig(storage_path=tempfile.mkdtemp(), verbose=0),
    ).fit()


def test_every_result_reaches_the_files_in_order(shared_node) -> None:
    grid = _fit({"n": 500, "every": 0, "slope": tune.grid_search([1, 2])})
    for result in grid:
        frame = result.metrics_dataframe
        assert list(frame["training_iteration"]) == list(range(1, 501))
        assert list(frame["i"]) == list(range(500))
        assert result.metrics["done"] is True


def test_a_result_with_a_checkpoint_is_the_trials_checkpoint(shared_node) -> None:
    (result,) = _fit({"n": 40, "every": 7, "slope": 1})
    assert list(result.metrics_dataframe["i"]) == list(range(40))
    with result.checkpoint.as_directory() as d:
        assert open(f"{d}/step.txt").read() == "34"  # the last of every 7th: 6, 13, ..., 34
    assert result.metrics["training_iteration"] == 40


def test_asha_stops_a_trial_and_nothing_past_the_stop_is_written(shared_node) -> None:
    scheduler = ASHAScheduler(max_t=300, grace_period=10, reduction_factor=3)
    grid = _fit(
        {"n": 300, "every": 0, "slope": tune.grid_search([1, -1, -2, -3])},
        metric="score",
        mode="max",
        scheduler=scheduler,
        max_concurrent_trials=4,
    )
    lengths = sorted(len(r.metrics_dataframe) for r in grid)
    assert lengths[-1] == 300  # the best trial ran to max_t
    assert lengths[0] < 300  # at least one was stopped at a rung
    for r in grid:
        frame = r.metrics_dataframe
        # Contiguous and ending at the stop: the last row written is the one marked done.
        assert list(frame["training_iteration"]) == list(range(1, len(frame) + 1))
        assert r.metrics["training_iteration"] == len(frame)
        assert bool(frame["done"].iloc[-1]) is True
