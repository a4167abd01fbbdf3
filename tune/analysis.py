"""``ExperimentAnalysis``: what the 0.8-era ``tune.run`` returns (best config, trial, checkpoint,
dataframes), over the same trial records as ``ResultGrid``; and ``Analysis``, Ray 0.8's reader of
a results directory (every trial directory under it, from the files alone)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ember.tune.checkpoint import Checkpoint
from ember.tune.files import STATE_PREFIX, flatten
from ember.tune.result_grid import Result, ResultGrid, _pandas, best_trial
from ember.tune.trial import Trial


def _rows(trial_dir: str) -> list[dict]:
    path = Path(trial_dir, "result.json")
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _check_mode(mode: str) -> None:
    if mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")


class Analysis:
    """Every trial directory (one holding ``result.json``) under ``experiment_dir``, read from
    its files: Ray 0.8's ``tune.Analysis``, for experiments that are over (or elsewhere)."""

    def __init__(self, experiment_dir: str | Path) -> None:
        root = Path(experiment_dir).expanduser()
        if not root.is_dir():
            raise ValueError(f"{root} is not a directory of Tune results")
        self._experiment_dir = str(root)
        self._trial_dirs = sorted(str(p.parent) for p in root.rglob("result.json"))

    def _logdirs(self) -> list[str]:
        return self._trial_dirs

    def _config(self, logdir: str) -> dict:
        path = Path(logdir, "params.json")
        return json.loads(path.read_text()) if path.exists() else {}

    def _score(self, logdir: str, metric: str, mode: str) -> float | None:
        values = [r[metric] for r in _rows(logdir) if isinstance(r.get(metric), int | float)]
        if not values:
            return None
        return max(values) if mode == "max" else min(values)

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> Any:
        """One row per trial: its last result, or (metric and mode) its best by metric."""
        out = []
        for logdir in self._logdirs():
            rows = _rows(logdir)
            if not rows:
                continue
            row = rows[-1]
            if metric and mode:
                _check_mode(mode)
                scored = [r for r in rows if isinstance(r.get(metric), int | float)]
                if scored:
                    pick = max if mode == "max" else min
                    row = pick(scored, key=lambda r: r[metric])
            flat = flatten(row)
            flat["logdir"] = logdir
            out.append(flat)
        return _pandas().DataFrame(out)

    def get_best_logdir(self, metric: str, mode: str = "max") -> str | None:
        _check_mode(mode)
        scored = [
            (s, d) for d in self._logdirs() if (s := self._score(d, metric, mode)) is not None
        ]
        if not scored:
            return None
        pick = max if mode == "max" else min
        return pick(scored, key=lambda sd: sd[0])[1]

    def get_best_config(self, metric: str, mode: str = "max") -> dict | None:
        logdir = self.get_best_logdir(metric, mode)
        return self._config(logdir) if logdir else None

    def get_all_configs(self, prefix: bool = False) -> dict[str, dict]:
        """Each trial's config by its directory; ``prefix``: flattened as ``config/...``."""
        configs = {d: self._config(d) for d in self._logdirs()}
        if prefix:
            return {d: flatten(c, "config/") for d, c in configs.items()}
        return configs

    def get_trial_checkpoints_paths(
        self, trial: Trial | str, metric: str = "training_iteration"
    ) -> list[tuple[str, Any]]:
        """[checkpoint path, the metric's value when it was taken] for each checkpoint the
        trial keeps (its checkpoint_NNNNNN directories)."""
        logdir = trial if isinstance(trial, str) else trial.local_path
        if logdir is None:
            return []
        rows = _rows(logdir)
        points = getattr(trial, "checkpoint_points", None)
        if points is not None:  # a trial record: the iteration each checkpoint was taken at
            kept = [(name, points.get(name, [None])[0]) for name, _ in trial.checkpoints]
        else:  # a directory alone: a function trainable's results name their checkpoints
            by_name = {r.get("checkpoint_dir_name"): r.get("training_iteration") for r in rows}
            kept = [
                (p.name, by_name.get(p.name)) for p in sorted(Path(logdir).glob("checkpoint_*"))
            ]
        at = {r.get("training_iteration"): r for r in rows}
        return [
            (str(Path(logdir, name)), at.get(it, {}).get(metric) if it is not None else None)
            for name, it in kept
            if Path(logdir, name).is_dir()
        ]

    @property
    def trial_dataframes(self) -> dict[str, Any]:
        """Every result of each trial, by its directory (from its result.json)."""
        return self.fetch_trial_dataframes()

    def fetch_trial_dataframes(self) -> dict[str, Any]:
        pandas = _pandas()
        return {
            d: pandas.DataFrame([flatten(r) for r in rows])
            for d in self._logdirs()
            if (rows := _rows(d))
        }


def _load_trials(experiment_checkpoint_path: str | Path) -> tuple[list[Trial], Path]:
    """The trials of an experiment's state file (or of the newest one in a directory)."""
    path = Path(experiment_checkpoint_path).expanduser()
    if path.is_dir():
        states = sorted(path.glob(f"{STATE_PREFIX}*.json"))
        if not states:
            raise ValueError(f"{path} holds no {STATE_PREFIX}*.json: not a Tune experiment")
        path = states[-1]
    if not path.exists():
        raise ValueError(f"{path} does not exist: pass an experiment directory or its state file")
    state = json.loads(path.read_text())
    return [Trial.from_json(t) for t in state["trials"]], path.parent


class ExperimentAnalysis(Analysis):
    """One experiment's trials: from ``tune.run``, or read back from its directory or state
    file (``ExperimentAnalysis("~/ray_results/my_exp")``)."""

    def __init__(
        self,
        experiment_checkpoint_path: str | Path,
        trials: list[Trial] | None = None,
        default_metric: str | None = None,
        default_mode: str | None = None,
    ) -> None:
        if trials is None:
            trials, experiment_dir = _load_trials(experiment_checkpoint_path)
        else:
            experiment_dir = Path(experiment_checkpoint_path)
        self.trials = trials
        self._experiment_dir = self.experiment_path = str(experiment_dir)
        self._grid = ResultGrid(trials, experiment_dir, default_metric, default_mode)
        self.default_metric, self.default_mode = default_metric, default_mode

    def _logdirs(self) -> list[str]:
        return [t.local_path for t in self.trials if t.local_path]

    def stats(self) -> dict:
        """How many trials the experiment has, by status."""
        statuses = sorted({t.status for t in self.trials})
        return {
            "experiment_dir": self._experiment_dir,
            "num_trials": len(self.trials),
            "statuses": {s: sum(t.status == s for t in self.trials) for s in statuses},
        }

    def runner_data(self) -> dict:
        """The experiment's state as its state file holds it (what a resume reads)."""
        states = sorted(Path(self._experiment_dir).glob(f"{STATE_PREFIX}*.json"))
        return json.loads(states[-1].read_text()) if states else {}

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

    def get_best_config(  # type: ignore[override]
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> dict | None:
        trial = self.get_best_trial(metric, mode, scope)
        return trial.config if trial else None

    def get_best_logdir(  # type: ignore[override]
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

    def get_all_configs(self, prefix: bool = False) -> dict[str, dict]:
        configs = {t.local_path: t.config for t in self.trials}
        if prefix:
            return {d: flatten(c, "config/") for d, c in configs.items()}
        return configs

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> Any:
        return self._grid.get_dataframe(filter_metric=metric, filter_mode=mode)

    @property
    def results_df(self) -> Any:
        """Each trial's last result (with its tag), flattened, indexed by trial id."""
        rows = [flatten({**t.last_result, "config": t.config}) for t in self.trials]
        return _pandas().DataFrame(rows).set_index("trial_id")
