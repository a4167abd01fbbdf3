"""What ``Tuner.fit()`` returns: a ``ResultGrid`` of one ``Result`` per trial, read from the
trials' records and their files."""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any

from ember.tune.checkpoint import Checkpoint
from ember.tune.files import flatten
from ember.tune.trial import ERROR, TERMINATED, Trial


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as e:
        raise ImportError("dataframes need pandas: pip install 'ember[tune]' (or pandas)") from e
    return pandas


class Result:
    def __init__(self, trial: Trial, experiment_dir: Path) -> None:
        self._trial = trial
        self.path = str(experiment_dir / trial.dirname) if trial.dirname else None
        metrics = dict(trial.last_result)
        if metrics:
            metrics.setdefault("config", trial.config)
        self.metrics = metrics
        self.config = trial.config
        self.trial_id = trial.trial_id
        self.status = trial.status

    @property
    def checkpoint(self) -> Checkpoint | None:
        name = self._trial.latest_checkpoint
        if not name or self.path is None:
            return None
        return Checkpoint(Path(self.path) / name)

    @property
    def best_checkpoints(self) -> list[tuple[Checkpoint, dict]]:
        """Every kept checkpoint with the result it was taken at, oldest first."""
        if self.path is None:
            return []
        out = []
        for name, _score in self._trial.checkpoints:
            metrics = self._metrics_at(name)
            out.append((Checkpoint(Path(self.path) / name), metrics))
        return out

    def _metrics_at(self, name: str) -> dict:
        import json

        result_file = Path(self.path or "", "result.json")
        if result_file.exists():
            for line in result_file.read_text().splitlines():
                row = json.loads(line)
                if row.get("checkpoint_dir_name") == name:
                    return row
        return dict(self._trial.last_result)

    @property
    def error(self) -> BaseException | None:
        if self._trial.status != ERROR:
            return None
        blob = Path(self.path or "", "error.pkl")
        if blob.exists():
            try:
                error = pickle.loads(blob.read_bytes())
            except Exception:  # noqa: BLE001 - its class is gone: the text stands in
                error = None
            # A task error is also an instance of its cause's class (except ValueError:
            # catches it), as when it was raised; pickling keeps only the plain class.
            if hasattr(error, "as_instanceof_cause"):
                error = error.as_instanceof_cause()
            if error is not None:
                return error
        return RuntimeError(self._trial.error_msg or "trial failed")

    @property
    def metrics_dataframe(self) -> Any:
        csv = Path(self.path or "", "progress.csv")
        if not csv.exists():
            return None
        return _pandas().read_csv(csv)

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.metrics.items() if k != "config"}
        return (
            f"Result(metrics={shown}, path={self.path!r}, "
            f"checkpoint={self.checkpoint}, error={self._trial.error_msg is not None})"
        )


def best_trial(
    trials: list[Trial],
    metric: str,
    mode: str,
    scope: str = "last",
    filter_nan_and_inf: bool = True,
) -> Trial | None:
    if mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
    if scope not in ("last", "all", "avg", "last-5-avg", "last-10-avg"):
        raise ValueError(f"scope must be 'last' or 'all', got {scope!r}")
    best, best_value = None, None
    for trial in trials:
        seen = trial.metric_analysis.get(metric)
        if seen is None:
            continue
        if scope == "all":
            value = seen["max"] if mode == "max" else seen["min"]
        else:
            value = seen["last"]
        if filter_nan_and_inf and (math.isnan(value) or math.isinf(value)):
            continue
        if best is None or (value > best_value if mode == "max" else value < best_value):
            best, best_value = trial, value
    return best


class ResultGrid:
    def __init__(
        self,
        trials: list[Trial],
        experiment_dir: Path,
        metric: str | None = None,
        mode: str | None = None,
    ) -> None:
        self._trials = trials
        self.experiment_path = str(experiment_dir)
        self._dir = experiment_dir
        self._metric, self._mode = metric, mode
        self._results = [Result(t, experiment_dir) for t in trials]

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, i: int) -> Result:
        return self._results[i]

    def __iter__(self) -> Any:
        return iter(self._results)

    @property
    def errors(self) -> list[BaseException]:
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        return sum(t.status == ERROR for t in self._trials)

    @property
    def num_terminated(self) -> int:
        return sum(t.status == TERMINATED for t in self._trials)

    def get_best_result(
        self,
        metric: str | None = None,
        mode: str | None = None,
        scope: str = "last",
        filter_nan_and_inf: bool = True,
    ) -> Result:
        metric, mode = metric or self._metric, mode or self._mode
        if not metric or not mode:
            raise ValueError(
                "get_best_result needs a metric and a mode: pass them here or in "
                "TuneConfig(metric=..., mode=...)"
            )
        trial = best_trial(self._trials, metric, mode, scope, filter_nan_and_inf)
        if trial is None:
            raise RuntimeError(f"no trial reported the metric {metric!r}")
        return self._results[self._trials.index(trial)]

    def get_dataframe(
        self, filter_metric: str | None = None, filter_mode: str | None = None
    ) -> Any:
        """One row per trial: its last result (or its best by ``filter_metric``), flattened
        with ``config/...`` columns, and ``logdir``."""
        rows = []
        for trial, result in zip(self._trials, self._results, strict=True):
            row = {k: v for k, v in trial.last_result.items() if k != "experiment_tag"}
            if filter_metric and filter_mode and result.path:
                frame = result.metrics_dataframe
                if frame is not None and filter_metric in frame:
                    pick = (
                        frame[filter_metric].idxmax()
                        if filter_mode == "max"
                        else frame[filter_metric].idxmin()
                    )
                    row = {**frame.loc[pick].to_dict(), "config": trial.config}
            row.setdefault("config", trial.config)
            flat = flatten(row)
            flat["logdir"] = trial.local_path
            rows.append(flat)
        return _pandas().DataFrame(rows)

    def __repr__(self) -> str:
        return f"ResultGrid<[{', '.join(repr(r) for r in self._results)}]>"
