"""ASHA (Li et al., "Massively Parallel Hyperparameter Tuning"): at each rung (grace_period
times powers of reduction_factor), a trial below the top 1/reduction_factor of the results
recorded there so far is stopped. Decisions are made as results arrive; nothing waits."""

from __future__ import annotations

import math

import numpy as np
from ember.tune.schedulers.trial_scheduler import (
    LoopView,
    TrialScheduler,
    TrialView,
    legacy_metric,
    metric_sign,
)


class _Bracket:
    def __init__(self, min_t: float, max_t: float, rf: float, s: int, stop_last: bool) -> None:
        self.rf = rf
        self.max_t = max_t
        self.stop_last = stop_last
        count = int(math.log(max_t / min_t) / math.log(rf) - s + 1)
        # Highest milestone first: a result is recorded at the highest rung it has reached.
        self.rungs: list[tuple[float, dict[str, float]]] = [
            (min_t * rf ** (k + s), {}) for k in reversed(range(count))
        ]

    def cutoff(self, recorded: dict[str, float]) -> float | None:
        if not recorded:
            return None
        return float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100))

    def on_result(self, trial_id: str, t: float, score: float | None) -> str:
        action = TrialScheduler.CONTINUE
        for milestone, recorded in self.rungs:
            if t >= self.max_t and self.stop_last:
                action = TrialScheduler.STOP
            if t < milestone or trial_id in recorded:
                continue
            cutoff = self.cutoff(recorded)
            if cutoff is not None and score is not None and score < cutoff:
                action = TrialScheduler.STOP
            if score is not None:
                recorded[trial_id] = score
            break
        return action


class AsyncHyperBandScheduler(TrialScheduler):
    needs_metric = True

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: float = 100,
        grace_period: float = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        stop_last_trials: bool = True,
        reward_attr: str | None = None,  # Ray 0.8's name for metric (maximised)
    ) -> None:
        if grace_period <= 0:
            raise ValueError(f"grace_period must be positive, got {grace_period}")
        if reduction_factor <= 1:
            raise ValueError(f"reduction_factor must be greater than 1, got {reduction_factor}")
        if max_t <= 0 or max_t < grace_period:
            raise ValueError(f"max_t ({max_t}) must be positive and at least grace_period")
        if brackets < 1:
            raise ValueError(f"brackets must be at least 1, got {brackets}")
        super().__init__(*legacy_metric(metric, mode, reward_attr))
        self.time_attr = time_attr
        self.max_t = max_t
        self.stop_last_trials = stop_last_trials
        self.brackets = [
            _Bracket(grace_period, max_t, reduction_factor, s, stop_last_trials)
            for s in range(brackets)
        ]
        self.trial_bracket: dict[str, _Bracket] = {}
        self.num_stopped = 0

    def on_trial_add(self, view: LoopView, trial: TrialView) -> None:
        if len(self.brackets) == 1:
            self.trial_bracket[trial.trial_id] = self.brackets[0]
            return
        # Brackets with more rungs are likelier (a softmax over rung counts), as in Ray.
        sizes = np.array([len(b.rungs) for b in self.brackets])
        probs = np.e ** (sizes - sizes.max())
        index = np.random.choice(len(self.brackets), p=probs / probs.sum())
        self.trial_bracket[trial.trial_id] = self.brackets[index]

    def on_trial_result(self, view: LoopView, trial: TrialView, result: dict) -> str:
        if self.time_attr not in result or self._metric not in result:
            return self.CONTINUE
        t = result[self.time_attr]
        if t >= self.max_t and self.stop_last_trials:
            action = self.STOP
        else:
            bracket = self.trial_bracket.setdefault(trial.trial_id, self.brackets[0])
            action = bracket.on_result(
                trial.trial_id, t, metric_sign(self._mode) * result[self._metric]
            )
        if action == self.STOP:
            self.num_stopped += 1
        return action

    def on_trial_complete(self, view: LoopView, trial: TrialView, result: dict) -> None:
        if self.time_attr in result and self._metric in result:
            bracket = self.trial_bracket.setdefault(trial.trial_id, self.brackets[0])
            bracket.on_result(
                trial.trial_id,
                result[self.time_attr],
                metric_sign(self._mode) * result[self._metric],
            )
        self.trial_bracket.pop(trial.trial_id, None)

    def on_trial_remove(self, view: LoopView, trial: TrialView) -> None:
        self.trial_bracket.pop(trial.trial_id, None)


ASHAScheduler = AsyncHyperBandScheduler
