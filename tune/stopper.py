"""Stoppers: per-trial and whole-experiment stop conditions, checked on every result.

``RunConfig(stop=...)`` takes a Stopper, a dict (stop once ``result[key] >= value``), or a
function ``(trial_id, result) -> bool``.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import numpy as np


class Stopper:
    def __call__(self, trial_id: str, result: dict) -> bool:
        raise NotImplementedError

    def stop_all(self) -> bool:
        return False


class NoopStopper(Stopper):
    def __call__(self, trial_id: str, result: dict) -> bool:
        return False


class FunctionStopper(Stopper):
    def __init__(self, function: Callable[[str, dict], bool]) -> None:
        self._fn = function

    def __call__(self, trial_id: str, result: dict) -> bool:
        return bool(self._fn(trial_id, result))


class DictStopper(Stopper):
    """Stops a trial once any ``result[key] >= value``. A key a result lacks is an error
    naming it (a typo there would otherwise run the trial forever)."""

    def __init__(self, criteria: dict[str, Any]) -> None:
        for key, value in criteria.items():
            if not isinstance(value, int | float):
                raise ValueError(f"stop criterion {key!r} must be a number, got {value!r}")
        self.criteria = dict(criteria)

    def __call__(self, trial_id: str, result: dict) -> bool:
        for key, value in self.criteria.items():
            if key not in result:
                raise ValueError(
                    f"stop criterion {key!r} is not in the trial's result; "
                    f"the result has: {sorted(result)}"
                )
            if result[key] >= value:
                return True
        return False


class MaximumIterationStopper(Stopper):
    def __init__(self, max_iter: int) -> None:
        self.max_iter = max_iter
        self.iters: dict[str, int] = defaultdict(int)

    def __call__(self, trial_id: str, result: dict) -> bool:
        self.iters[trial_id] += 1
        return self.iters[trial_id] >= self.max_iter


class TrialPlateauStopper(Stopper):
    """Stops a trial whose last ``num_results`` values of ``metric`` have a standard
    deviation at most ``std``, after ``grace_period`` results (and, if given, once the
    metric passed ``metric_threshold`` in the mode's direction)."""

    def __init__(
        self,
        metric: str,
        std: float = 0.01,
        num_results: int = 4,
        grace_period: int = 4,
        metric_threshold: float | None = None,
        mode: str | None = None,
    ) -> None:
        if metric_threshold is not None and mode not in ("min", "max"):
            raise ValueError("TrialPlateauStopper with metric_threshold needs mode 'min' or 'max'")
        self.metric = metric
        self.std = std
        self.num_results = num_results
        self.grace_period = grace_period
        self.threshold = metric_threshold
        self.mode = mode
        self.iters: dict[str, int] = defaultdict(int)
        self.window: dict[str, deque] = defaultdict(lambda: deque(maxlen=self.num_results))

    def __call__(self, trial_id: str, result: dict) -> bool:
        if self.metric not in result:
            return False
        value = result[self.metric]
        self.window[trial_id].append(value)
        self.iters[trial_id] += 1
        if self.iters[trial_id] < self.grace_period:
            return False
        if self.threshold is not None:
            if self.mode == "min" and value > self.threshold:
                return False
            if self.mode == "max" and value < self.threshold:
                return False
        window = self.window[trial_id]
        if len(window) < self.num_results:
            return False
        return bool(np.std(list(window)) <= self.std)


class ExperimentPlateauStopper(Stopper):
    """Stops the whole experiment once the ``top`` best values of ``metric`` (over all
    trials) have a standard deviation at most ``std`` for ``patience`` more results."""

    def __init__(
        self, metric: str, std: float = 0.001, top: int = 10, mode: str = "min", patience: int = 0
    ) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        if not isinstance(top, int) or top <= 1:
            raise ValueError(f"top must be an integer greater than one, got {top!r}")
        if not isinstance(patience, int) or patience < 0:
            raise ValueError(f"patience must be a non-negative integer, got {patience!r}")
        if not isinstance(std, float) or std <= 0:
            raise ValueError(f"std must be a positive float, got {std!r}")
        self.metric, self.std, self.top, self.mode, self.patience = metric, std, top, mode, patience
        self.values: list[float] = []
        self.plateau_results = 0

    def __call__(self, trial_id: str, result: dict) -> bool:
        self.values.append(result[self.metric])
        ranked = sorted(self.values)
        self.values = ranked[: self.top] if self.mode == "min" else ranked[-self.top :]
        self.plateau_results = self.plateau_results + 1 if self._plateaued() else 0
        return self.stop_all()

    def _plateaued(self) -> bool:
        return len(self.values) == self.top and float(np.std(self.values)) <= self.std

    def stop_all(self) -> bool:
        return self._plateaued() and self.plateau_results >= self.patience


class TimeoutStopper(Stopper):
    """Stops the whole experiment after ``timeout`` seconds (or a ``datetime.timedelta``)."""

    def __init__(self, timeout: Any) -> None:
        seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
        if not isinstance(seconds, int | float) or seconds <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.budget = float(seconds)
        self.start: float | None = None

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        now = time.monotonic()
        if self.start is None:
            self.start = now
        return now - self.start >= self.budget


class CombinedStopper(Stopper):
    def __init__(self, *stoppers: Stopper) -> None:
        self.stoppers = stoppers

    def __call__(self, trial_id: str, result: dict) -> bool:
        # Every stopper sees every result (counters must advance), so no short-circuit.
        return any([s(trial_id, result) for s in self.stoppers])

    def stop_all(self) -> bool:
        return any([s.stop_all() for s in self.stoppers])


def as_stopper(stop: Any) -> Stopper:
    if stop is None:
        return NoopStopper()
    if isinstance(stop, Stopper):
        return stop
    if isinstance(stop, dict):
        return DictStopper(stop)
    if callable(stop):
        return FunctionStopper(stop)
    raise ValueError(
        f"stop must be a dict, a function (trial_id, result) -> bool, or a Stopper; got {stop!r}"
    )
