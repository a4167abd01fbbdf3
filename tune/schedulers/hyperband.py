"""Synchronous HyperBand (Li et al., 2017): trials are grouped into brackets; a bracket's
trials each run to its milestone and pause there, and when all have arrived the best
1/reduction_factor continue to the next milestone while the rest stop.

Decisions only: it asks the loop to stop paused trials (``view.stop_trial``) and says which
paused ones may resume (``choose_trial_to_run``); it never touches an actor.
"""

from __future__ import annotations

import math
from typing import Any

from ember.tune.schedulers.trial_scheduler import (
    LoopView,
    TrialScheduler,
    legacy_metric,
    metric_sign,
)


class _Bracket:
    def __init__(
        self, n0: int, r0: int, max_t: int, eta: float, s: int, stop_last: bool, time_attr: str
    ) -> None:
        self.n, self.r, self.milestone = n0, r0, r0
        self.n0, self.max_t, self.eta = n0, max_t, eta
        self.halves = s
        self.stop_last = stop_last
        self.time_attr = time_attr
        self.live: dict[str, dict | None] = {}  # trial id -> its latest result
        self.trials: dict[str, Any] = {}
        self.to_unpause: set[str] = set()
        self.progress = 0.0
        self.total_work = self._work(n0, r0, s)

    def _work(self, n: float, r: float, s: int) -> float:
        work = 0
        for _ in range(s + 1):
            work += int(n) * int(r)
            n = math.ceil(n / self.eta)
            r = int(min(r * self.eta, self.max_t))
        return max(work, 1)

    def t(self, result: dict | None) -> float:
        return result[self.time_attr] if result else 0

    def add(self, trial: Any) -> None:
        self.live[trial.trial_id] = None
        self.trials[trial.trial_id] = trial

    def filled(self) -> bool:
        return len(self.trials) == self.n0

    def update(self, trial_id: str, result: dict) -> None:
        self.progress += max(self.t(result) - self.t(self.live.get(trial_id)), 0)
        self.live[trial_id] = result
        self.to_unpause.discard(trial_id)

    def at_milestone(self) -> bool:
        return all(self.t(r) >= self.milestone for r in self.live.values())

    def finished(self) -> bool:
        return self.stop_last and self.halves == 0 and self.at_milestone()

    def should_continue(self, trial_id: str) -> bool:
        if not self.stop_last and self.halves == 0:
            return True
        return self.t(self.live[trial_id]) < self.milestone

    def halve(self, metric: str, sign: float) -> tuple[list[str], list[str]]:
        if self.halves == 0 and not self.stop_last:
            return list(self.live), []
        self.halves -= 1
        self.n = math.ceil(self.n / self.eta)
        self.r = int(min(self.r * self.eta, self.max_t))
        self.milestone = self.r
        ranked = sorted(self.live, key=lambda tid: sign * self.live[tid][metric])
        return ranked[-self.n :], ranked[: -self.n]

    def completion(self) -> float:
        return 1.0 if self.finished() else min(self.progress / self.total_work, 1.0)


class HyperBandScheduler(TrialScheduler):
    needs_metric = True

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: int = 81,
        reduction_factor: float = 3,
        stop_last_trials: bool = True,
        reward_attr: str | None = None,  # Ray 0.8's name for metric (maximised)
    ) -> None:
        if reduction_factor <= 1:
            raise ValueError(f"reduction_factor must be greater than 1, got {reduction_factor}")
        if max_t < 1:
            raise ValueError(f"max_t must be at least 1, got {max_t}")
        super().__init__(*legacy_metric(metric, mode, reward_attr))
        self.time_attr = time_attr
        self.eta = reduction_factor
        self.max_t = max_t
        self.stop_last = stop_last_trials
        self.s_max_1 = int(round(math.log(max_t) / math.log(reduction_factor))) + 1
        self.bands: list[list[_Bracket]] = [[]]
        self.current: _Bracket | None = None
        self.bracket_of: dict[str, _Bracket] = {}
        self.num_stopped = 0

    def _n0(self, s: int) -> int:
        return int(math.ceil(self.s_max_1 / (s + 1) * self.eta**s))

    def _r0(self, s: int) -> int:
        return int(self.max_t * self.eta ** (-s))

    def on_trial_add(self, view: LoopView, trial: Any) -> None:
        if self.current is None or self.current.filled():
            while True:
                if len(self.bands[-1]) == self.s_max_1:
                    self.bands.append([])
                s = len(self.bands[-1])
                r0 = self._r0(s)
                self.current = (
                    None
                    if r0 == 0
                    else _Bracket(
                        self._n0(s), r0, self.max_t, self.eta, s, self.stop_last, self.time_attr
                    )
                )
                self.bands[-1].append(self.current)
                if self.current is not None:
                    break
        self.current.add(trial)
        self.bracket_of[trial.trial_id] = self.current

    def on_trial_result(self, view: LoopView, trial: Any, result: dict) -> str:
        bracket = self.bracket_of[trial.trial_id]
        bracket.update(trial.trial_id, result)
        if bracket.should_continue(trial.trial_id):
            return self.CONTINUE
        return self._process(view, bracket, trial.trial_id)

    def _process(self, view: LoopView, bracket: _Bracket, current: str | None) -> str:
        """Once every live trial of the bracket is at its milestone: halve it."""
        action = self.PAUSE
        if not bracket.at_milestone():
            return action
        if bracket.finished():
            for tid in list(bracket.live):
                if tid != current:
                    self._stop(view, bracket, tid)
            return self.STOP
        good, bad = bracket.halve(self._metric, metric_sign(self._mode))
        self.num_stopped += len(bad)
        for tid in bad:
            if tid == current:
                bracket.live.pop(tid, None)
                action = self.STOP
            else:
                self._stop(view, bracket, tid)
        for tid in good:
            if bracket.should_continue(tid):
                if tid == current:
                    action = self.CONTINUE
                else:
                    bracket.to_unpause.add(tid)
        return action

    def _stop(self, view: Any, bracket: _Bracket, trial_id: str) -> None:
        trial = bracket.trials[trial_id]
        bracket.live.pop(trial_id, None)
        # A trial still saving on its way to PAUSED (RUNNING, stop requested) is stopped too.
        pausing = trial.status == "RUNNING" and trial.stop_requested
        if trial.status in ("PAUSED", "PENDING") or pausing:
            view.stop_trial(trial)

    def on_trial_complete(self, view: LoopView, trial: Any, result: dict) -> None:
        self._remove(view, trial)

    def on_trial_error(self, view: LoopView, trial: Any) -> None:
        self._remove(view, trial)

    def _remove(self, view: LoopView, trial: Any) -> None:
        bracket = self.bracket_of.get(trial.trial_id)
        if bracket is None or trial.trial_id not in bracket.live:
            return
        bracket.live.pop(trial.trial_id, None)
        if bracket.live and not bracket.finished():
            self._process(view, bracket, None)

    def choose_trial_to_run(self, view: LoopView) -> Any | None:
        for band in self.bands:
            for bracket in sorted((b for b in band if b), key=lambda b: b.completion()):
                for tid in list(bracket.live):
                    trial = bracket.trials[tid]
                    if trial.status == "PENDING" or (
                        trial.status == "PAUSED" and tid in bracket.to_unpause
                    ):
                        return trial
        return None
