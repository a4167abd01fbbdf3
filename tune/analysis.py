"""``ExperimentAnalysis``: what the 0.8-era ``tune.run`` returns (best config, trial, checkpoint,
dataframes), over the same trial records as ``ResultGrid``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ember.tune.checkpoint import Checkpoint
from ember.tune.files import flatten
from ember.tune.result_grid import Result, ResultGrid, _pandas, best_trial
from ember.tune.trial import Trial


class ExperimentAnalysis:
    def __init__(
        self,
        trials: list[Trial],
        experiment_dir: Path,
        default_metric: str | None = None,
        default_mode: str | None = None,
    ) -> None:
        self.trials = trials
        self.experiment_path = str(experiment_dir)
        self._grid = ResultGrid(trials, experiment_dir, default_metric, default_mode)
        self.default_metric, self.default_mode = default_metric, default_mode

    def _metric_mode(self, metric: str | None, mode: str | None) -> tuple[str, str]:
        metric, mode = metric or self.default_metric, mode or self.default_mode
        if not metric or not mode:
            raise ValueError(
                "this needs a metric and a mode: pass metric= and mode= here or to tune.run"
            )
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        return metric, mode

    def get_best_trial(
        self,
        metric: str | None = None,
        mode: str | None = None,
        scope: str = "last",
        filter_nan_and_inf: bool = True,
    ) -> Trial | None:
        metric, mode = self._metric_mode(metric, mode)
        return best_trial(self.trials, metric, mode, scope, filter_nan_and_inf)

    def get_best_config(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> dict | None:
        trial = self.get_best_trial(metric, mode, scope)
        return trial.config if trial else None

    def get_best_logdir(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> str | None:
        trial = self.get_best_trial(metric, mode, scope)
        return trial.local_path if trial else None

    def get_best_checkpoint(
        self, trial: Trial, metric: str | None = None, mode: str | None = None
    ) -> Checkpoint | None:
        metric, mode = self._metric_mode(metric, mode)
        result = self._result(trial)
        best, best_value = None, None
        for checkpoint, metrics in result.best_checkpoints:
            value = metrics.get(metric)
            if value is None:
                continue
            if best is None or (value > best_value if mode == "max" else value < best_value):
                best, best_value = checkpoint, value
        return best

    def _result(self, trial: Trial) -> Result:
        return self._grid[self.trials.index(trial)]

    @property
    def best_trial(self) -> Trial | None:
        return self.get_best_trial()

    @property
    def best_config(self) -> dict | None:
        return self.get_best_config()

    @property
    def best_logdir(self) -> str | None:
        return self.get_best_logdir()

    @property
    def best_checkpoint(self) -> Checkpoint | None:
        trial = self.best_trial
        return self.get_best_checkpoint(trial) if trial else None

    @property
    def best_result(self) -> dict:
        trial = self.best_trial
        return trial.last_result if trial else {}

    @property
    def results(self) -> dict[str, dict]:
        return {t.trial_id: t.last_result for t in self.trials}

    def get_all_configs(self) -> dict[str, dict]:
        return {t.local_path: t.config for t in self.trials}

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> Any:
        return self._grid.get_dataframe(filter_metric=metric, filter_mode=mode)

    @property
    def results_df(self) -> Any:
        """Each trial's last result (with its tag), flattened, indexed by trial id."""
        rows = [flatten({**t.last_result, "config": t.config}) for t in self.trials]
        return _pandas().DataFrame(rows).set_index("trial_id")

    @property
    def trial_dataframes(self) -> dict[str, Any]:
        """Every result of each trial (from its result.json, config columns included)."""
        frames = {}
        for trial in self.trials:
            path = Path(trial.local_path or "", "result.json")
            if trial.local_path and path.exists():
                rows = [flatten(json.loads(x)) for x in path.read_text().splitlines()]
                frames[trial.local_path] = _pandas().DataFrame(rows)
        return frames
