"""TensorBoard event files per trial, written with tensorboardX as Ray Tune's
``TBXLoggerCallback`` writes them: one ``events.out.tfevents.*`` file per run of a trial in its
directory, every numeric result field as a scalar ``ray/tune/<field>`` (nested fields joined by
``/``) at step ``timesteps_total`` or ``training_iteration``, and when the trial ends its sampled
hyperparameters with the last scalars as TensorBoard's hparams. The tag prefix stays Ray's, so a
TensorBoard layout or filter made for Ray's runs works on Ember's.

Added by default when tensorboardX is installed (``pip install 'ember[tune]'``), unless the
user passes one or sets ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1``, as in Ray."""

from __future__ import annotations

import math
import os
import sys
import time
from numbers import Real
from typing import Any

from ember.tune.callback import Callback
from ember.tune.files import flatten

# Ray 0.8's logger classes live in ray.tune.logger too (the seed imports DEFAULT_LOGGERS here).
from ember.tune.legacy_logger import (  # noqa: F401 - re-exported
    DEFAULT_LOGGERS,
    CSVLogger,
    JsonLogger,
    LegacyLoggers,
    Logger,
    TBXLogger,
)

# Fields every result has that a curve of would say nothing (Ray leaves out the same ones).
SKIPPED = ("config", "pid", "timestamp", "time_total_s", "training_iteration")
VALID_HPARAMS = (str, bool, int, float, list, type(None))
FLUSH_SECS = 30  # the writer's own timer, as Ray's
# Ray flushes after every result; a flush goes through tensorboardX's queue and writer thread
# and was a quarter of the driver's time with 8 trials reporting 200 results/s each. Flushed
# at most this often per trial (and when the trial ends), TensorBoard still sees a running
# trial's points within a second.
FLUSH_EVERY_S = 1.0


def _scalar(value: Any) -> bool:
    # Ray's VALID_SUMMARY_TYPES (Python and NumPy ints and floats; bools are ints), not NaN.
    if not isinstance(value, Real):
        return False
    return not (isinstance(value, float) and math.isnan(value))


class TBXLoggerCallback(Callback):
    def __init__(self) -> None:
        from tensorboardX import SummaryWriter  # ImportError names the missing package

        self._writer_cls = SummaryWriter
        self._writers: dict[str, Any] = {}
        self._last: dict[str, dict] = {}
        self._flushed: dict[str, float] = {}  # {trial id: when its writer was last flushed}

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._open(trial)

    def _open(self, trial: Any) -> Any:
        old = self._writers.pop(trial.trial_id, None)
        if old is not None:
            old.close()
        writer = self._writer_cls(trial.local_path, flush_secs=FLUSH_SECS)
        self._writers[trial.trial_id] = writer
        self._last[trial.trial_id] = {}
        return writer

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        writer = self._writers.get(trial.trial_id) or self._open(trial)
        step = result.get("timesteps_total") or result["training_iteration"]
        logged: dict = {}
        for key, value in flatten({k: v for k, v in result.items() if k not in SKIPPED}).items():
            tag = f"ray/tune/{key}"
            if _scalar(value):
                writer.add_scalar(tag, value, global_step=step)
                logged[tag] = value
            elif isinstance(value, list) and value:
                try:
                    writer.add_histogram(tag, value, global_step=step)
                    logged[tag] = value
                except (ValueError, TypeError):
                    pass  # not numbers (a list of names): nothing TensorBoard can draw
        self._last[trial.trial_id] = logged
        now = time.monotonic()
        if now - self._flushed.get(trial.trial_id, 0.0) >= FLUSH_EVERY_S:
            writer.flush()
            self._flushed[trial.trial_id] = now

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

    def _end(self, trial: Any) -> None:
        writer = self._writers.pop(trial.trial_id, None)
        self._flushed.pop(trial.trial_id, None)
        if writer is None:
            return
        last = {k: v for k, v in self._last.pop(trial.trial_id, {}).items() if _scalar(v)}
        params = getattr(trial, "evaluated_params", None) or {}
        if params and last:
            self._hparams(writer, params, last)
        writer.close()

    @staticmethod
    def _hparams(writer: Any, params: dict, metrics: dict) -> None:
        from tensorboardX.summary import hparams

        kept = {k: v for k, v in params.items() if isinstance(v, VALID_HPARAMS)}
        try:
            for summary in hparams(hparam_dict=kept, metric_dict=metrics):
                writer.file_writer.add_summary(summary)
        except Exception as e:  # noqa: BLE001 - a value hparams refuses costs only the hparams
            print(f"ember.tune: TensorBoard hparams not written: {e}", file=sys.stderr)


def default_callbacks(callbacks: list | None, loggers: Any = None) -> list:
    """The user's callbacks and, as Ray adds it, a TBXLoggerCallback when tensorboardX is
    installed and none was passed. ``loggers`` (Ray 0.8's ``tune.run(loggers=...)``): the
    user's Logger classes run per trial, and event files only if ``TBXLogger`` is listed."""
    out = list(callbacks or [])
    if loggers is not None:
        out.append(LegacyLoggers(list(loggers)))
        if TBXLogger not in loggers:
            return out
    if os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "0") == "1":
        return out
    if any(isinstance(c, TBXLoggerCallback) for c in out):
        return out
    try:
        out.append(TBXLoggerCallback())
    except ImportError:
        pass  # event files are optional: pip install 'ember[tune]' writes them
    return out
