"""Ray 0.8's logger classes for ``tune.run(loggers=[...])``: ``Logger`` (subclass it: one
instance per trial, given the trial's config and directory, told each result), and the names
of the built-in ones, ``JsonLogger``, ``CSVLogger``, ``TBXLogger`` and ``DEFAULT_LOGGERS``.

Ember's driver always writes result.json, progress.csv and params.json (the analysis reads
them), so the built-in names only choose whether TensorBoard event files are written (when
``TBXLogger`` is in the list); each other class runs as the seed describes, on the driver."""

from __future__ import annotations

from typing import Any

from ember.tune.callback import Callback


class Logger:
    """One trial's logger: ``on_result(result)`` per result, ``flush()``, ``close()``."""

    def __init__(self, config: dict, logdir: str, trial: Any = None) -> None:
        self.config = config
        self.logdir = logdir
        self.trial = trial
        self._init()

    def _init(self) -> None:
        pass

    def on_result(self, result: dict) -> None:
        raise NotImplementedError

    def update_config(self, config: dict) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class JsonLogger(Logger):
    """result.json and params.json (always written by the driver)."""

    def on_result(self, result: dict) -> None:
        pass


class CSVLogger(Logger):
    """progress.csv (always written by the driver)."""

    def on_result(self, result: dict) -> None:
        pass


class TBXLogger(Logger):
    """TensorBoard event files (written by ``TBXLoggerCallback`` when listed)."""

    def on_result(self, result: dict) -> None:
        pass


DEFAULT_LOGGERS = (JsonLogger, CSVLogger, TBXLogger)
BUILT_IN = DEFAULT_LOGGERS


class LegacyLoggers(Callback):
    """Runs the user's Logger classes: one instance of each per trial run."""

    def __init__(self, classes: list[type]) -> None:
        for cls in classes:
            if not (isinstance(cls, type) and issubclass(cls, Logger)):
                raise TypeError(
                    f"loggers must be tune.logger.Logger subclasses; {cls!r} is not (pass "
                    "callbacks=[...] for tune.Callback objects)"
                )
        self.classes = [c for c in classes if c not in BUILT_IN]
        self.open: dict[str, list[Logger]] = {}

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._close(trial)
        self.open[trial.trial_id] = [c(trial.config, trial.local_path, trial) for c in self.classes]

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        for logger in self.open.get(trial.trial_id, []):
            logger.on_result(result)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._close(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._close(trial)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        for trial in trials:
            self._close(trial)

    def _close(self, trial: Any) -> None:
        for logger in self.open.pop(trial.trial_id, []):
            logger.flush()
            logger.close()
