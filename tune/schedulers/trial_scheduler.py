"""The scheduler interface: each result is answered with a decision and nothing else.

Schedulers do no I/O. They see the trials through a small view of the loop
(``view.live_trials()``) and answer ``CONTINUE``, ``PAUSE`` or ``STOP``; the loop acts.
"""

from __future__ import annotations

from typing import Any, Protocol


class TrialView(Protocol):
    trial_id: str
    status: str  # a trial pausing stays RUNNING, stop_requested, until its checkpoint lands
    stop_requested: bool
    config: dict


class LoopView(Protocol):
    def live_trials(self) -> list[Any]: ...

    def stop_trial(self, trial: Any) -> None: ...


def metric_sign(mode: str | None) -> float:
    return 1.0 if mode == "max" else -1.0


def check_mode(mode: str | None) -> None:
    if mode is not None and mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")


class TrialScheduler:
    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"
    STOP = "STOP"
    NOOP = "NOOP"

    # Schedulers that compare trials need a metric and a mode before the first trial.
    needs_metric = False

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        check_mode(mode)
        self._metric = metric
        self._mode = mode

    @property
    def metric(self) -> str | None:
        return self._metric

    @property
    def mode(self) -> str | None:
        return self._mode

    def set_search_properties(self, metric: str | None, mode: str | None) -> bool:
        if self._metric and metric and self._metric != metric:
            return False
        if self._mode and mode and self._mode != mode:
            return False
        self._metric = self._metric or metric
        self._mode = self._mode or mode
        return True

    def missing_properties(self) -> list[str]:
        """What a comparing scheduler still lacks (checked before any trial starts)."""
        if not self.needs_metric:
            return []
        return [name for name in ("metric", "mode") if getattr(self, f"_{name}") is None]

    def on_trial_add(self, view: LoopView, trial: TrialView) -> None:
        pass

    def on_trial_error(self, view: LoopView, trial: TrialView) -> None:
        pass

    def on_trial_result(self, view: LoopView, trial: TrialView, result: dict) -> str:
        return self.CONTINUE

    def on_trial_complete(self, view: LoopView, trial: TrialView, result: dict) -> None:
        pass

    def on_trial_remove(self, view: LoopView, trial: TrialView) -> None:
        pass

    def choose_trial_to_run(self, view: LoopView) -> Any | None:
        """The next trial to start or resume: pending ones first, then paused, in order."""
        live = view.live_trials()
        for status in ("PENDING", "PAUSED"):
            for trial in live:
                if trial.status == status:
                    return trial
        return None

    def debug_string(self) -> str:
        """One line for the progress report (Ray 0.8's ``TrialScheduler.debug_string``)."""
        return f"Using {type(self).__name__}."


class FIFOScheduler(TrialScheduler):
    """Every trial runs to its end, in the order it was added."""

    def debug_string(self) -> str:
        return "Using FIFO scheduling algorithm."


def legacy_metric(
    metric: str | None, mode: str | None, reward_attr: str | None
) -> tuple[str | None, str | None]:
    """Ray 0.8's ``reward_attr=`` (the seed's schedulers take it): the metric, maximised."""
    if reward_attr is None:
        return metric, mode
    if metric is not None and metric != reward_attr:
        raise ValueError(
            f"reward_attr={reward_attr!r} and metric={metric!r} disagree: pass metric= alone"
        )
    return reward_attr, mode or "max"
