"""Median stopping (Golovin et al., "Google Vizier"): a trial whose best result by time t is
worse than the median of the other trials' running means up to t is stopped."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from ember.tune.schedulers.trial_scheduler import LoopView, TrialScheduler, TrialView, legacy_metric


class MedianStoppingRule(TrialScheduler):
    needs_metric = True

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        grace_period: float = 60.0,
        min_samples_required: int = 3,
        min_time_slice: float = 0,
        hard_stop: bool = True,
        reward_attr: str | None = None,  # Ray 0.8's name for metric (maximised)
    ) -> None:
        super().__init__(*legacy_metric(metric, mode, reward_attr))
        self.time_attr = time_attr
        self.grace_period = grace_period
        self.min_samples_required = min_samples_required
        self.min_time_slice = min_time_slice
        self.hard_stop = hard_stop
        self.stopped: set[str] = set()
        self.last_pause: dict[str, float] = defaultdict(lambda: float("-inf"))
        self.results: dict[str, list[dict]] = defaultdict(list)

    def _better(self) -> type[max] | type[min]:
        return max if self._mode == "max" else min

    def on_trial_result(self, view: LoopView, trial: TrialView, result: dict) -> str:
        if self.time_attr not in result or self._metric not in result:
            return self.CONTINUE
        tid = trial.trial_id
        if tid in self.stopped:
            return self.CONTINUE  # a soft-stopped (paused) trial resumed: let it run
        t = result[self.time_attr]
        self.results[tid].append(result)
        if t < self.grace_period:
            return self.CONTINUE
        others = [
            other
            for other, rs in self.results.items()
            if other != tid and rs[-1][self.time_attr] >= t
        ]
        means = [m for m in (self._running_mean(o, t) for o in others) if np.isfinite(m)]
        if len(means) < self.min_samples_required:
            # Too few to judge: yield the slot to a waiting trial if there is one.
            waiting = any(x.status in ("PENDING", "PAUSED") for x in view.live_trials())
            if waiting and t - self.last_pause[tid] > self.min_time_slice:
                self.last_pause[tid] = t
                return self.PAUSE
            return self.CONTINUE
        median = float(np.median(means))
        best = self._better()(r[self._metric] for r in self.results[tid])
        if self._better()(median, best) != best:
            self.stopped.add(tid)
            return self.STOP if self.hard_stop else self.PAUSE
        return self.CONTINUE

    def on_trial_complete(self, view: LoopView, trial: TrialView, result: dict) -> None:
        if result:
            self.results[trial.trial_id].append(result)

    def _running_mean(self, tid: str, t: float) -> float:
        scoped = [
            r[self._metric]
            for r in self.results[tid]
            if self.grace_period <= r[self.time_attr] <= t
        ]
        return float(np.mean(scoped)) if scoped else float("nan")
