"""The 0.8-era entry points: ``tune.run``, ``tune.run_experiments`` and ``tune.Experiment``,
mapped onto Tuner (one engine, two spellings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ember.tune.analysis import ExperimentAnalysis
from ember.tune.config import (
    CheckpointConfig,
    FailureConfig,
    RunConfig,
    TuneConfig,
    default_storage_path,
)
from ember.tune.resources import as_resources, with_resources
from ember.tune.trial import ERROR
from ember.tune.tuner import Tuner


class TuneError(Exception):
    """Raised by ``tune.run`` when trials failed (``raise_on_failed_trial=True``)."""


class Experiment:
    """A named experiment spec for ``run_experiments`` (the same arguments as tune.run)."""

    def __init__(self, name: str, run: Any, **kwargs: Any) -> None:
        self.name = name
        self.run = run
        self.kwargs = kwargs


def run(
    run_or_experiment: Any,
    name: str | None = None,
    metric: str | None = None,
    mode: str | None = None,
    stop: Any = None,
    time_budget_s: float | None = None,
    config: dict | None = None,
    resources_per_trial: Any = None,
    num_samples: int = 1,
    storage_path: str | None = None,
    local_dir: str | None = None,
    search_alg: Any = None,
    scheduler: Any = None,
    checkpoint_config: CheckpointConfig | None = None,
    checkpoint_freq: int = 0,
    checkpoint_at_end: bool = False,
    keep_checkpoints_num: int | None = None,
    checkpoint_score_attr: str | None = None,
    verbose: int | None = None,
    callbacks: list | None = None,
    max_failures: int = 0,
    fail_fast: bool = False,
    restore: str | None = None,
    resume: bool | str = False,
    raise_on_failed_trial: bool = True,
    max_concurrent_trials: int | None = None,
    reuse_actors: bool | None = None,
    progress_reporter: Any = None,
    **unsupported: Any,
) -> ExperimentAnalysis:
    if isinstance(run_or_experiment, Experiment):
        merged = {**run_or_experiment.kwargs, "name": run_or_experiment.name}
        return run(run_or_experiment.run, **merged)
    if unsupported:
        raise ValueError(f"tune.run does not take {sorted(unsupported)}")
    trainable = run_or_experiment
    if resources_per_trial is not None:
        trainable = with_resources(trainable, as_resources(resources_per_trial))
    if checkpoint_config is None:
        score_attr, order = checkpoint_score_attr, "max"
        if score_attr and score_attr.startswith("min-"):
            score_attr, order = score_attr[4:], "min"
        checkpoint_config = CheckpointConfig(
            num_to_keep=keep_checkpoints_num,
            checkpoint_score_attribute=score_attr,
            checkpoint_score_order=order,
            checkpoint_frequency=checkpoint_freq,
            checkpoint_at_end=checkpoint_at_end or None,
        )
    storage = storage_path or local_dir or default_storage_path()
    run_config = RunConfig(
        name=name,
        storage_path=storage,
        stop=stop,
        callbacks=callbacks,
        checkpoint_config=checkpoint_config,
        failure_config=FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
        verbose=verbose,
        progress_reporter=progress_reporter,
    )
    tune_config = TuneConfig(
        metric=metric,
        mode=mode,
        search_alg=search_alg,
        scheduler=scheduler,
        num_samples=num_samples,
        max_concurrent_trials=max_concurrent_trials,
        time_budget_s=time_budget_s,
        reuse_actors=bool(reuse_actors),
    )
    path = Path(restore) if restore else (Path(storage).expanduser() / name if name else None)
    if (resume or restore) and path is not None and Tuner.can_restore(path):
        tuner = Tuner.restore(
            str(path),
            trainable,
            resume_errored=resume in ("ERRORED_ONLY", "AUTO+ERRORED"),
            restart_errored=resume in ("RESTART_ERRORED", "AUTO+RESTART_ERRORED"),
        )
        tuner.run_config.callbacks = callbacks
    else:
        tuner = Tuner(
            trainable, param_space=config or {}, tune_config=tune_config, run_config=run_config
        )
    grid = tuner.fit()
    trials = grid._trials
    failed = [t for t in trials if t.status == ERROR]
    if failed and raise_on_failed_trial:
        raise TuneError(f"Trials did not complete: {[str(t) for t in failed]}")
    return ExperimentAnalysis(trials, Path(grid.experiment_path), metric, mode)


def run_experiments(
    experiments: Experiment | list[Experiment] | dict[str, dict], **kwargs: Any
) -> list:
    """Runs each experiment in turn; returns their trials (as Ray's does)."""
    if isinstance(experiments, Experiment):
        experiments = [experiments]
    if isinstance(experiments, dict):
        experiments = [
            Experiment(name, spec.pop("run"), **spec)
            for name, spec in ((n, dict(s)) for n, s in experiments.items())
        ]
    trials: list = []
    for experiment in experiments:
        trials += run(experiment, **kwargs).trials
    return trials
