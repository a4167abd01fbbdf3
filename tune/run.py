"""The 0.8-era entry points: ``tune.run``, ``tune.run_experiments`` and ``tune.Experiment``,
mapped onto Tuner (one engine, two spellings), with tune.run's arguments as the seed lists
them: each one Ember does something with does it, the syncing ones that have nothing to do
(the driver writes every result file itself) are accepted, and the rest fail naming why."""

from __future__ import annotations

import inspect
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
from ember.tune.files import latest_state
from ember.tune.resources import as_resources, with_resources
from ember.tune.trial import ERROR
from ember.tune.tuner import Tuner


class TuneError(Exception):
    """Raised by ``tune.run`` when trials failed (``raise_on_failed_trial=True``)."""


# tune.run arguments about copying files between nodes or to the cloud: Ember's driver writes
# every trial's files itself, so there is nothing to sync to it (accepted, nothing done).
NOTHING_TO_DO = {"sync_to_driver", "sync_on_checkpoint", "global_checkpoint_period",
                 "queue_trials", "ray_auto_init"}  # fmt: skip
NOT_SUPPORTED = {
    "upload_dir": "uploading results is not built; copy local_dir after the run",
    "sync_to_cloud": "uploading results is not built; copy local_dir after the run",
    "export_formats": "exporting models is not built; call self.export_model() in _stop",
    "trial_executor": "Ember runs trials as actors itself; a custom executor is not taken",
}


class Experiment:
    """A named experiment spec for ``run_experiments`` (the same arguments as tune.run)."""

    def __init__(self, name: str, run: Any, **kwargs: Any) -> None:
        self.name = name
        self.run = run
        self.kwargs = kwargs
        self.spec = {"run": run, **kwargs}


def checkpoint_to_restore(path: str) -> tuple[str, int, float]:
    """``tune.run(restore=...)``: a trial's checkpoint directory (or a file in it), with the
    iteration and time it was taken at, read from the experiment that wrote it."""
    where = Path(path).expanduser()
    if not where.exists():
        raise ValueError(f"restore={path!r}: no such checkpoint")
    checkpoint = where if where.is_dir() else where.parent
    trial_dir = checkpoint.parent
    state = latest_state(trial_dir.parent) or {}
    for trial in state.get("trials", []):
        if trial.get("dirname") == trial_dir.name:
            iteration, time_total = trial.get("checkpoint_points", {}).get(checkpoint.name, [0, 0])
            return str(checkpoint), iteration, time_total
    return str(checkpoint), 0, 0.0


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
    trial_name_creator: Any = None,
    loggers: Any = None,
    with_server: bool = False,
    server_port: int = 4321,
    return_trials: bool = False,
    **other: Any,
) -> Any:
    if isinstance(run_or_experiment, Experiment):
        merged = {**run_or_experiment.kwargs, "name": run_or_experiment.name}
        given = dict(
            search_alg=search_alg, scheduler=scheduler, verbose=verbose,
            progress_reporter=progress_reporter, resume=resume, reuse_actors=reuse_actors,
            raise_on_failed_trial=raise_on_failed_trial, with_server=with_server,
            server_port=server_port, callbacks=callbacks,
        )  # fmt: skip
        defaults = {k: p.default for k, p in inspect.signature(run).parameters.items()}
        merged.update({k: v for k, v in given.items() if v is not defaults[k] and v != defaults[k]})
        return run(run_or_experiment.run, **merged)
    for key, value in other.items():
        if key in NOT_SUPPORTED and value:
            raise ValueError(f"tune.run({key}=...): {NOT_SUPPORTED[key]}")
        if key not in NOT_SUPPORTED and key not in NOTHING_TO_DO:
            raise ValueError(f"tune.run does not take {key!r}")
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
    path = Path(storage).expanduser() / name if name else None
    if resume == "PROMPT":
        raise ValueError('resume="PROMPT" asks on a terminal; pass resume=True or False')
    if resume == "REMOTE":
        raise ValueError('resume="REMOTE" restores from upload_dir, which is not built')
    if resume and path is not None and Tuner.can_restore(path):
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
        tuner._initial_checkpoint = checkpoint_to_restore(restore) if restore else None
    tuner._trial_name_creator = trial_name_creator
    tuner._loggers = loggers
    tuner._server_port = server_port if with_server else None
    grid = tuner.fit()
    trials = grid._trials
    failed = [t for t in trials if t.status == ERROR]
    if failed and raise_on_failed_trial:
        raise TuneError(f"Trials did not complete: {[str(t) for t in failed]}")
    if return_trials:
        return trials
    return ExperimentAnalysis(Path(grid.experiment_path), trials, metric, mode)


def run_experiments(
    experiments: Experiment | list[Experiment] | dict[str, dict], **kwargs: Any
) -> list:
    """Runs each experiment in turn; returns their trials (as Ray's does)."""
    kwargs.pop("concurrent", None)  # one experiment after another, as with concurrent=False
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
