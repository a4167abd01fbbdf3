"""Population Based Training (Jaderberg et al., 2017): every ``perturbation_interval`` a trial
in the bottom ``quantile_fraction`` copies the checkpoint of one in the top (exploit) and
continues with a perturbed copy of its config (explore). Decides only: the trial is PAUSEd
with its new config and the donor's checkpoint recorded on it, and the loop restarts it from
there; each perturbation is kept on the trial (``trial.perturbations``). ``synch=True`` (Ray's
synchronous PBT): a trial at a boundary pauses until every live trial has reached it, then
the bottom quantile exploits the top one together and all resume."""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ember.tune.schedulers.trial_scheduler import (
    LoopView,
    TrialScheduler,
    TrialView,
    legacy_metric,
    metric_sign,
)
from ember.tune.search.sample import Domain


def explore(
    config: dict,
    mutations: dict,
    resample_probability: float,
    factors: tuple[float, ...],
    rng: random.Random,
) -> tuple[dict, dict]:
    """(the new config, what was done to each key): lists shift one place or resample;
    domains and functions resample or scale by one of ``factors``."""
    new = copy.deepcopy(config)
    ops: dict[str, Any] = {}
    for key, space in mutations.items():
        if isinstance(space, dict):
            new[key], ops[key] = explore(config[key], space, resample_probability, factors, rng)
        elif isinstance(space, list | tuple):
            if rng.random() < resample_probability or config.get(key) not in space:
                new[key] = rng.choice(space)
                ops[key] = "resample"
            else:
                shift = rng.choice([-1, 1])
                old = list(space).index(config[key])
                index = min(max(old + shift, 0), len(space) - 1)
                new[key] = space[index]
                noop = " (noop)" if index == old else ""
                ops[key] = f"shift {'left' if shift == -1 else 'right'}{noop}"
        elif isinstance(space, Domain) or callable(space):
            if rng.random() < resample_probability:
                new[key] = space.sample() if isinstance(space, Domain) else space()
                ops[key] = "resample"
            else:
                factor = rng.choice(factors)
                value = config[key] * factor
                new[key] = int(value) if isinstance(config[key], int) else value
                ops[key] = f"* {factor}"
        else:
            raise ValueError(
                f"hyperparam_mutations[{key!r}] must be a list, a dict, a search space or a "
                f"function; got {type(space).__name__}"
            )
    return new, ops


class PopulationBasedTraining(TrialScheduler):
    needs_metric = True

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        burn_in_period: float = 0.0,
        hyperparam_mutations: dict | None = None,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors: tuple[float, ...] = (1.2, 0.8),
        custom_explore_fn: Callable[[dict], dict] | None = None,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        seed: int | None = None,
        reward_attr: str | None = None,  # Ray 0.8's name for metric (maximised)
    ) -> None:
        if not hyperparam_mutations and not custom_explore_fn:
            raise ValueError(
                "PopulationBasedTraining needs hyperparam_mutations or custom_explore_fn"
            )
        if not 0 <= quantile_fraction <= 0.5:
            raise ValueError(f"quantile_fraction must be in [0, 0.5], got {quantile_fraction}")
        if perturbation_interval <= 0:
            raise ValueError(f"perturbation_interval must be positive, got {perturbation_interval}")
        super().__init__(*legacy_metric(metric, mode, reward_attr))
        self.synch = synch
        # synch: trials paused at the current boundary, waiting for the rest of the population.
        self.waiting: set[str] = set()
        self.time_attr = time_attr
        self.interval = perturbation_interval
        self.burn_in = burn_in_period
        self.mutations = hyperparam_mutations or {}
        self.quantile_fraction = quantile_fraction
        self.resample_probability = resample_probability
        self.factors = tuple(perturbation_factors)
        self.custom_explore_fn = custom_explore_fn
        self.log_config = log_config  # the controller writes pbt_global.txt / pbt_policy_*.txt
        self.require_attrs = require_attrs
        self.rng = random.Random(seed)
        self.last_perturbed: dict[str, float] = {}
        self.score: dict[str, float] = {}
        self.num_perturbations = 0

    def debug_string(self) -> str:
        return f"{type(self).__name__}: {self.num_perturbations} perturbs"

    def on_trial_add(self, view: LoopView, trial: TrialView) -> None:
        self.last_perturbed.setdefault(trial.trial_id, 0.0)

    def on_trial_result(self, view: LoopView, trial: Any, result: dict) -> str:
        if self.time_attr not in result or self._metric not in result:
            if self.require_attrs:
                missing = [k for k in (self.time_attr, self._metric) if k not in result]
                raise ValueError(
                    f"PopulationBasedTraining needs {missing} in every result "
                    "(or require_attrs=False)"
                )
            return self.CONTINUE
        t = result[self.time_attr]
        tid = trial.trial_id
        self.score[tid] = metric_sign(self._mode) * result[self._metric]
        if t < self.burn_in or t - self.last_perturbed.get(tid, 0.0) < self.interval:
            return self.CONTINUE
        self.last_perturbed[tid] = t
        if self.synch:
            return self._synch_arrived(view, trial, t)
        lower, upper = self._quantiles(view)
        if tid not in {t.trial_id for t in lower}:
            return self.CONTINUE
        return self.PAUSE if self._exploit(trial, upper, t) else self.CONTINUE

    # --- synchronous: the whole population perturbs at once ---------------------------------
    def _synch_arrived(self, view: LoopView, trial: Any, t: float) -> str:
        """Each trial pauses at the boundary (its checkpoint is what others copy) until the
        last live one arrives; then the bottom ones exploit the top ones and all go on."""
        self.waiting.add(trial.trial_id)
        if not self._all_arrived(view):
            return self.PAUSE
        in_lower = self._release(view, t)
        return self.PAUSE if trial.trial_id in in_lower else self.CONTINUE

    def _all_arrived(self, view: LoopView) -> bool:
        return all(t.trial_id in self.waiting for t in view.live_trials())

    def _release(self, view: LoopView, t: float) -> set[str]:
        lower, upper = self._quantiles(view)
        exploited = {x.trial_id for x in lower if self._exploit(x, upper, t)}
        self.waiting.clear()
        return exploited

    def choose_trial_to_run(self, view: LoopView) -> Any | None:
        live = view.live_trials()
        for status in ("PENDING", "PAUSED"):
            for trial in live:
                if trial.status == status and trial.trial_id not in self.waiting:
                    return trial
        return None

    def on_trial_complete(self, view: LoopView, trial: Any, result: dict) -> None:
        self._left(view, trial)

    def on_trial_error(self, view: LoopView, trial: Any) -> None:
        self._left(view, trial)

    def _left(self, view: LoopView, trial: Any) -> None:
        # A trial that ends no longer holds the others back.
        self.waiting.discard(trial.trial_id)
        self.score.pop(trial.trial_id, None)
        others = [x for x in view.live_trials() if x.trial_id != trial.trial_id]
        if self.synch and self.waiting and all(x.trial_id in self.waiting for x in others):
            self._release(view, max(self.last_perturbed.get(x, 0.0) for x in self.waiting))

    # --- exploit and explore ------------------------------------------------------------
    def _exploit(self, trial: Any, upper: list, t: float) -> bool:
        """The trial takes a top trial's checkpoint and a perturbed copy of its config; False
        when no top trial has a checkpoint yet."""
        donors = [d for d in upper if _checkpoint_path(d) is not None]
        if not donors:
            return False  # nobody to copy yet: the top trials have no checkpoint
        donor = self.rng.choice(donors)
        new_config, ops = self._new_config(trial, donor)
        if self.custom_explore_fn:
            new_config = self.custom_explore_fn(new_config)
        trial.perturbations.append(
            {
                "time": t,
                "clone_from": donor.trial_id,
                "clone_iteration": donor.checkpoint_iteration,
                "old_config": trial.config,
                "new_config": new_config,
                "operations": ops,
            }
        )
        trial.config = new_config
        trial.restore_path = _checkpoint_path(donor)
        trial.restore_iteration = donor.checkpoint_iteration
        trial.restore_time_total = donor.checkpoint_time_total
        self.num_perturbations += 1
        return True

    def _new_config(self, trial: Any, donor: Any) -> tuple[dict, dict]:
        """The config ``trial`` continues with from ``donor``'s checkpoint (PB2 overrides)."""
        return explore(
            donor.config, self.mutations, self.resample_probability, self.factors, self.rng
        )

    def _quantiles(self, view: LoopView) -> tuple[list, list]:
        scored = sorted(
            (t for t in view.live_trials() if t.trial_id in self.score and not t.is_finished),
            key=lambda t: self.score[t.trial_id],
        )
        if len(scored) <= 1:
            return [], []
        n = int(math.ceil(len(scored) * self.quantile_fraction))
        n = min(n, len(scored) // 2)
        return scored[:n], scored[-n:]

    def wants_checkpoint(self, trial: Any) -> bool:
        """Top trials keep a fresh checkpoint for others to copy (class trainables)."""
        return trial.trial_id in self.score and self.last_perturbed.get(trial.trial_id) == (
            trial.last_result.get(self.time_attr)
        )


def _checkpoint_path(trial: Any) -> str | None:
    if not trial.latest_checkpoint or not trial.dirname or not trial.experiment_dir:
        return None
    path = Path(trial.experiment_dir, trial.dirname, trial.latest_checkpoint)
    return str(path) if path.is_dir() else None
