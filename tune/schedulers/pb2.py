"""PB2, Population Based Bandits (Parker-Holder et al., 2020): PBT whose explore step picks the
new hyperparameters with GP-UCB over their bounds (``hyperparam_bounds``) instead of random
perturbation. Every trial at a perturbation boundary adds an observation (its time, reward
and hyperparameters); the bottom trials still copy a top trial's checkpoint (exploit), and
their new values are those the model expects to raise the reward fastest from the copied
trial's time and reward, with the values other trials are already trying made less
attractive. The GP itself is ``pb2_gp.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from ember.tune.schedulers.pb2_gp import select
from ember.tune.schedulers.pbt import PopulationBasedTraining
from ember.tune.schedulers.trial_scheduler import LoopView, TrialView, metric_sign

MAX_ROWS = 5000  # observations kept (the GP uses the newest MAX_POINTS of pb2_gp.py)


def _check_bounds(bounds: Any) -> dict[str, tuple[float, float]]:
    if not isinstance(bounds, dict) or not bounds:
        raise ValueError(
            "PB2 needs hyperparam_bounds: a dict of hyperparameter -> [min, max], e.g. "
            '{"lr": [1e-4, 1e-1]}'
        )
    out = {}
    for key, value in bounds.items():
        if isinstance(value, dict):
            raise ValueError(
                f"hyperparam_bounds[{key!r}]: nested hyperparameters are not supported by "
                "Ember's PB2; put the bounded values at the top of the config"
            )
        try:
            low, high = (float(v) for v in value)
        except (TypeError, ValueError):
            raise ValueError(
                f"hyperparam_bounds[{key!r}] must be [min, max] numbers, got {value!r}"
            ) from None
        if not low < high:
            raise ValueError(f"hyperparam_bounds[{key!r}]: min {low} must be below max {high}")
        out[key] = (low, high)
    return out


class PB2(PopulationBasedTraining):
    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        hyperparam_bounds: dict | None = None,
        quantile_fraction: float = 0.25,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        custom_explore_fn: Callable[[dict], dict] | None = None,
        seed: int | None = None,
    ) -> None:
        self.bounds = _check_bounds(hyperparam_bounds)
        super().__init__(
            time_attr=time_attr,
            metric=metric,
            mode=mode,
            perturbation_interval=perturbation_interval,
            # PBT's random perturbations are not used: _new_config below replaces them.
            hyperparam_mutations={k: list(b) for k, b in self.bounds.items()},
            quantile_fraction=quantile_fraction,
            custom_explore_fn=custom_explore_fn,
            log_config=log_config,
            require_attrs=require_attrs,
            synch=synch,
            seed=seed,
        )
        self.np_rng = np.random.default_rng(seed)
        self.keys = list(self.bounds)
        self.low = np.array([self.bounds[k][0] for k in self.keys])
        self.high = np.array([self.bounds[k][1] for k in self.keys])
        # (trial id, time, hyperparameter values, reward): one per trial per boundary.
        self.rows: list[tuple[str, float, tuple[float, ...], float]] = []
        self.pending: list[np.ndarray] = []  # values chosen since the data last moved on
        self.pending_time = -np.inf

    def on_trial_add(self, view: LoopView, trial: TrialView) -> None:
        # A bounded value the config does not set starts uniform within its bounds (as Ray).
        for key in self.keys:
            if key not in trial.config:
                low, high = self.bounds[key]
                trial.config[key] = float(self.np_rng.uniform(low, high))
        super().on_trial_add(view, trial)

    def on_trial_result(self, view: LoopView, trial: Any, result: dict) -> str:
        t, value = result.get(self.time_attr), result.get(self._metric)
        tid = trial.trial_id
        if (
            isinstance(t, int | float)
            and isinstance(value, int | float)
            and t >= self.burn_in
            and t - self.last_perturbed.get(tid, 0.0) >= self.interval
        ):
            values = tuple(float(trial.config[k]) for k in self.keys)
            self.rows.append((tid, float(t), values, metric_sign(self._mode) * value))
            del self.rows[:-MAX_ROWS]
        return super().on_trial_result(view, trial, result)

    def _observations(self) -> tuple[np.ndarray, np.ndarray]:
        """X = [time, reward before, values], y = reward change per unit of time, from each
        trial's consecutive boundaries with the same values."""
        x, y = [], []
        last: dict[str, tuple[float, tuple, float]] = {}
        for tid, t, values, reward in sorted(self.rows, key=lambda r: r[1]):
            before = last.get(tid)
            if before is not None and before[1] == values and t > before[0]:
                x.append([t, before[2], *values])
                y.append((reward - before[2]) / (t - before[0]))
            last[tid] = (t, values, reward)
        return np.array(x, dtype=float), np.array(y, dtype=float)

    def _new_config(self, trial: Any, donor: Any) -> tuple[dict, dict]:
        new = dict(donor.config)
        mine = [r for r in self.rows if r[0] == donor.trial_id]
        x, y = self._observations()
        if not mine or len(y) < 2:
            # Nothing to model yet: values uniform within their bounds (Ray does the same).
            chosen = self.np_rng.uniform(self.low, self.high)
            how = "uniform (no data yet)"
        else:
            _, donor_t, _, donor_reward = mine[-1]
            if x[:, 0].max() > self.pending_time:  # time moved on: earlier picks are stale
                self.pending, self.pending_time = [], float(x[:, 0].max())
            pending = np.array(self.pending) if self.pending else None
            chosen = select(
                x, y, np.array([donor_t, donor_reward]), self.low, self.high, pending, self.np_rng
            )
            how = "GP-UCB"
        self.pending.append(chosen)
        for key, value in zip(self.keys, chosen, strict=True):
            # The donor's type is kept (an int hyperparameter stays an int).
            new[key] = type(donor.config[key])(value) if key in donor.config else float(value)
        # The trial now carries the donor's weights with new values: its next reward change
        # is measured from the donor's time and reward.
        if mine:
            _, donor_t, _, donor_reward = mine[-1]
            values = tuple(float(new[k]) for k in self.keys)
            self.rows.append((trial.trial_id, donor_t, values, donor_reward))
        return new, {key: how for key in self.keys}
