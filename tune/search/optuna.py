"""``OptunaSearch``: Optuna does the searching (its TPE sampler unless given another); Ember
converts Tune's search space into Optuna distributions as Ray does, asks the study for each
trial's config and tells it every intermediate result and each trial's end.

Optional: ``pip install 'ember[optuna]'`` (or ``optuna``)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from ember.tune.files import flatten
from ember.tune.search.convert import Param, check_ready, has_domains, parse_space, unflatten
from ember.tune.search.searcher import Searcher


def _optuna() -> Any:
    try:
        import optuna
    except ImportError as e:
        raise ImportError(
            "OptunaSearch needs Optuna: pip install 'ember[optuna]' (or optuna>=3)"
        ) from e
    return optuna


def _distribution(ot: Any, p: Param) -> Any:
    d = p.domain
    if p.kind == "float" and p.sampler == "loguniform":
        return ot.distributions.FloatDistribution(d.lower, d.upper, log=True)  # q dropped, as Ray
    if p.kind == "float" and p.sampler == "uniform":
        return ot.distributions.FloatDistribution(d.lower, d.upper, step=p.q)
    if p.kind == "int" and p.sampler == "loguniform":
        return ot.distributions.IntDistribution(d.lower, d.upper - 1, step=p.q or 1, log=True)
    if p.kind == "int" and p.sampler == "uniform":
        # The upper bound is inclusive when quantized, exclusive otherwise (Tune's meaning).
        return ot.distributions.IntDistribution(d.lower, d.upper - int(not p.q), step=int(p.q or 1))
    if p.kind == "choice" and p.sampler == "uniform":
        return ot.distributions.CategoricalDistribution(d.categories)
    raise p.unsupported("Optuna search")


def convert_search_space(spec: dict) -> dict[str, Any]:
    """Tune's space as Optuna distributions, named by "/"-joined path (nested dicts)."""
    ot = _optuna()
    return {p.name: _distribution(ot, p) for p in parse_space(spec, "Optuna")}


class OptunaSearch(Searcher):
    convert_search_space = staticmethod(convert_search_space)  # Ray's spelling

    def __init__(
        self,
        space: dict | list | Any = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict] | None = None,
        sampler: Any = None,
        study_name: str | None = None,
        storage: Any = None,
        seed: int | None = None,
        evaluated_rewards: list | None = None,
    ) -> None:
        ot = _optuna()
        super().__init__(metric=metric, mode=mode)
        if sampler is not None and not isinstance(sampler, ot.samplers.BaseSampler):
            raise TypeError(
                f"sampler must be an optuna.samplers.BaseSampler, got {type(sampler).__name__}"
            )
        if evaluated_rewards is not None and len(evaluated_rewards) != len(
            points_to_evaluate or []
        ):
            raise ValueError(
                f"evaluated_rewards has {len(evaluated_rewards)} values for "
                f"{len(points_to_evaluate or [])} points_to_evaluate; give one per point"
            )
        if isinstance(space, dict) and space:
            space = convert_search_space(space) if has_domains(space) else flatten(space)
        self._space = space
        self._points = list(points_to_evaluate or [])
        self._rewards = evaluated_rewards
        self._study_name = study_name or "optuna"
        self._sampler = sampler
        self._seed = seed
        self._storage = storage
        self._ot_trials: dict[str, Any] = {}
        self._completed: set[str] = set()
        self._study: Any = None
        if self._space:
            self._setup_study()

    def _setup_study(self) -> None:
        ot = _optuna()
        sampler = self._sampler or ot.samplers.TPESampler(seed=self._seed)
        self._study = ot.study.create_study(
            storage=self._storage,
            sampler=sampler,
            pruner=ot.pruners.NopPruner(),  # Tune's schedulers stop trials, not Optuna
            study_name=self._study_name,
            load_if_exists=True,
            direction="minimize" if self._mode == "min" else "maximize",
        )
        for i, point in enumerate(self._points):
            flat = flatten(point)
            if not callable(self._space):
                unknown = sorted(set(flat) - set(self._space))
                if unknown:
                    raise ValueError(
                        f"points_to_evaluate[{i}] has {unknown}, which the search space "
                        f"does not (it has {sorted(self._space)})"
                    )
            if self._rewards:
                self.add_evaluated_point(flat, self._rewards[i])
            else:
                self._study.enqueue_trial(flat)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict) -> bool:
        if self._space:
            return False  # it has its own space (and metric/mode from its constructor)
        self._space = convert_search_space(config)
        self._metric = metric or self._metric
        self._mode = mode or self._mode
        if self._space:
            self._setup_study()
        return True

    def check_ready(self) -> None:
        check_ready(self, bool(self._space))

    def suggest(self, trial_id: str) -> dict | None:
        self.check_ready()
        if trial_id not in self._ot_trials:
            if callable(self._space):
                self._ot_trials[trial_id] = self._study.ask()
            else:
                self._ot_trials[trial_id] = self._study.ask(fixed_distributions=self._space)
        ot_trial = self._ot_trials[trial_id]
        if callable(self._space):
            extra = self._space(ot_trial)
            return unflatten({**ot_trial.params, **(extra or {})})
        return unflatten(ot_trial.params)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self._completed or trial_id not in self._ot_trials:
            return
        value = result.get(self._metric)
        if value is not None:
            self._ot_trials[trial_id].report(value, result.get("training_iteration", 0))

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        if trial_id in self._completed or trial_id not in self._ot_trials:
            return
        state = _optuna().trial.TrialState
        value = result.get(self._metric) if result else None
        status = state.COMPLETE
        if value is None:
            status = state.FAIL if error else state.PRUNED
        try:
            self._study.tell(self._ot_trials[trial_id], value, state=status)
        except Exception as e:  # noqa: BLE001 - Optuna refuses a NaN: that trial is not told
            print(f"ember.tune: Optuna did not take trial {trial_id}'s result: {e}")
        self._completed.add(trial_id)

    def add_evaluated_point(
        self,
        parameters: dict,
        value: float,
        error: bool = False,
        pruned: bool = False,
        intermediate_values: list[float] | None = None,
    ) -> None:
        ot = _optuna()
        if callable(self._space) or not self._space:
            raise TypeError(
                "add_evaluated_point needs a space of distributions (a define-by-run function "
                "cannot take evaluated points)"
            )
        state = ot.trial.TrialState
        status = state.FAIL if error else state.PRUNED if pruned else state.COMPLETE
        self._study.add_trial(
            ot.trial.create_trial(
                state=status,
                value=None if status == state.FAIL else value,
                params=flatten(parameters),
                distributions=self._space,
                intermediate_values=dict(enumerate(intermediate_values or [])) or None,
            )
        )

    def save(self, checkpoint_path: str) -> None:
        path = Path(checkpoint_path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(pickle.dumps(self.__dict__.copy()))
        tmp.replace(path)

    def restore(self, checkpoint_path: str) -> None:
        self.__dict__.update(pickle.loads(Path(checkpoint_path).read_bytes()))
