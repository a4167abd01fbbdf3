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
# Ray flushes after every result. Here a trial's file is flushed at most this often (and when
# the trial ends): TensorBoard still sees a running trial's points within a second.
FLUSH_EVERY_S = 1.0


def _scalar(value: Any) -> bool:
    # Ray's VALID_SUMMARY_TYPES (Python and NumPy ints and floats; bools are ints), not NaN.
    if not isinstance(value, Real):
        return False
    return not (isinstance(value, float) and math.isnan(value))


class _EventFile:
    """One run of a trial's event file, written in the caller's thread: tensorboardX's own
    record writer and protocol buffers, without its ``SummaryWriter``. That writer hands
    every scalar to a thread through a ``multiprocessing.Queue`` (a pickle and a pipe write
    per value, three threads per trial); with 8 trials reporting 200 results/s each, that
    and one event per scalar were most of the driver's time. Here a result is one event
    holding all its values, as TensorBoard reads it the same."""

    def __init__(self, logdir: str) -> None:
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event

        self._event = Event  # kept: write() runs per result
        os.makedirs(logdir, exist_ok=True)
        self._events = EventsWriter(os.path.join(logdir, "events"))
        self.flushed = time.monotonic()

    def write(self, summary: Any, step: int | None = None) -> None:
        event = self._event(wall_time=time.time(), summary=summary)
        if step is not None:
            event.step = int(step)
        self._events.write_event(event)

    def flush(self) -> None:
        self._events.flush()
        self.flushed = time.monotonic()

    def close(self) -> None:
        self._events.close()


_DEFAULT_BINS: list[float] = []


def _histogram_bins() -> list[float]:
    # TensorFlow's default buckets, as tensorboardX's SummaryWriter builds them.
    if not _DEFAULT_BINS:
        v, pos = 1e-12, []
        while v < 1e20:
            pos.append(v)
            v *= 1.1
        _DEFAULT_BINS.extend([-b for b in reversed(pos)] + [0.0] + pos)
    return _DEFAULT_BINS


class TBXLoggerCallback(Callback):
    def __init__(self) -> None:
        from tensorboardX.summary import Summary  # ImportError names the missing package

        self._summary = Summary
        self._files: dict[str, _EventFile] = {}
        self._last: dict[str, dict] = {}
        self._tags: dict[str, str] = {}  # {result key: its cleaned tag}, built once per key

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._open(trial)

    def _open(self, trial: Any) -> _EventFile:
        old = self._files.pop(trial.trial_id, None)
        if old is not None:
            old.close()
        events = _EventFile(trial.local_path)
        self._files[trial.trial_id] = events
        self._last[trial.trial_id] = {}
        return events

    def _tag(self, key: str) -> str:
        tag = self._tags.get(key)
        if tag is None:
            from tensorboardX.summary import _clean_tag

            tag = self._tags[key] = _clean_tag(f"ray/tune/{key}")
        return tag

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        events = self._files.get(trial.trial_id) or self._open(trial)
        step = result.get("timesteps_total") or result["training_iteration"]
        logged: dict = {}
        values = []
        value_cls = self._summary.Value
        for key, value in flatten({k: v for k, v in result.items() if k not in SKIPPED}).items():
            tag = self._tag(key)
            if _scalar(value):
                values.append(value_cls(tag=tag, simple_value=float(value)))
                logged[tag] = value
            elif isinstance(value, list) and value:
                try:
                    from tensorboardX.summary import histogram

                    values.extend(histogram(tag, value, _histogram_bins()).value)
                    logged[tag] = value
                except (ValueError, TypeError):
                    pass  # not numbers (a list of names): nothing TensorBoard can draw
        if values:
            events.write(self._summary(value=values), step)
        self._last[trial.trial_id] = logged
        if time.monotonic() - events.flushed >= FLUSH_EVERY_S:
            events.flush()

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        for events in self._files.values():
            events.close()
        self._files.clear()

    def _end(self, trial: Any) -> None:
        events = self._files.pop(trial.trial_id, None)
        if events is None:
            return
        last = {k: v for k, v in self._last.pop(trial.trial_id, {}).items() if _scalar(v)}
        params = getattr(trial, "evaluated_params", None) or {}
        if params and last:
            self._hparams(events, params, last)
        events.close()

    @staticmethod
    def _hparams(events: _EventFile, params: dict, metrics: dict) -> None:
        from tensorboardX.summary import hparams

        kept = {k: v for k, v in params.items() if isinstance(v, VALID_HPARAMS)}
        try:
            for summary in hparams(hparam_dict=kept, metric_dict=metrics):
                events.write(summary)
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
