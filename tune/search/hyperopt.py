"""``HyperOptSearch``: HyperOpt's TPE does the searching; Ember converts Tune's search space
into a HyperOpt space as Ray does (``hp.uniform``, ``hp.loguniform``, ``hp.choice``, ...), asks
TPE for each trial's point and hands each trial's final metric back as HyperOpt's loss.

Optional: ``pip install 'ember[hyperopt]'`` (or ``hyperopt``)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import cloudpickle
from ember.tune.search.convert import (
    Param,
    check_ready,
    has_domains,
    parse_space,
)
from ember.tune.search.sample import Domain
from ember.tune.search.searcher import Searcher
from ember.tune.search.variants import _assign

HYPEROPT_UNDEFINED_DETAILS = (
    " This issue can also come up with HyperOpt if your search space only contains "
    "constant variables, which is not supported by HyperOpt. In that case, don't pass any "
    "searcher or add sample variables to the search space."
)


def _hyperopt() -> Any:
    try:
        import hyperopt
    except ImportError as e:
        raise ImportError(
            "HyperOptSearch needs HyperOpt: pip install 'ember[hyperopt]' (or hyperopt)"
        ) from e
    return hyperopt


def _expression(hpo: Any, name: str, p: Param) -> Any:
    import numpy as np

    d, q = p.domain, p.q
    if p.kind == "float" and p.sampler == "loguniform":
        low, high = np.log(d.lower), np.log(d.upper)
        return hpo.hp.qloguniform(name, low, high, q) if q else hpo.hp.loguniform(name, low, high)
    if p.kind == "float" and p.sampler == "uniform":
        return (
            hpo.hp.quniform(name, d.lower, d.upper, q)
            if q
            else hpo.hp.uniform(name, d.lower, d.upper)
        )
    if p.kind == "float" and p.sampler == "normal":
        s = d.get_sampler()
        s = getattr(s, "sampler", s)
        return hpo.hp.qnormal(name, s.mean, s.sd, q) if q else hpo.hp.normal(name, s.mean, s.sd)
    if p.kind == "int" and p.sampler == "loguniform":
        high = np.log(d.upper) if q else np.log(d.upper - 1)
        return hpo.base.pyll.scope.int(hpo.hp.qloguniform(name, np.log(d.lower), high, q or 1.0))
    if p.kind == "int" and p.sampler == "uniform":
        if q:
            return hpo.base.pyll.scope.int(hpo.hp.quniform(name, d.lower, d.upper - 1, q))
        return hpo.hp.uniformint(name, d.lower, high=d.upper - 1)
    if p.kind == "choice" and p.sampler == "uniform":
        options = []
        for i, category in enumerate(d.categories):
            if isinstance(category, dict) and has_domains(category):
                options.append(convert_search_space(category, prefix=name))
            elif isinstance(category, list) and category and isinstance(category[0], Domain):
                options.append(convert_search_space(dict(enumerate(category)), f"{name}/{i}"))
            elif isinstance(category, Domain):
                options.append(
                    _expression(hpo, f"{name}/{i}", parse_space({"v": category}, "HyperOpt")[0])
                )
            else:
                options.append(category)
        return hpo.hp.choice(name, options)
    raise p.unsupported("HyperOpt")


def convert_search_space(spec: dict, prefix: str = "") -> dict:
    """Tune's space with each domain replaced by a HyperOpt expression named by its path."""
    hpo = _hyperopt()
    spec = copy.deepcopy(spec)
    for p in parse_space(spec, "HyperOpt"):
        name = f"{prefix}/{p.name}" if prefix else p.name
        _assign(spec, p.path, _expression(hpo, name, p))
    return spec


class HyperOptSearch(Searcher):
    convert_search_space = staticmethod(convert_search_space)  # Ray's spelling

    def __init__(
        self,
        space: dict | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict] | None = None,
        n_initial_points: int = 20,
        random_state_seed: int | None = None,
        gamma: float = 0.25,
        max_concurrent: int | None = None,
        use_early_stopped_trials: bool | None = None,
    ) -> None:
        import numpy as np

        hpo = _hyperopt()
        super().__init__(metric, mode, max_concurrent, use_early_stopped_trials)
        self._n_initial_points = n_initial_points
        self._gamma = gamma
        self._points = copy.deepcopy(points_to_evaluate) or []
        self._to_evaluate = 0
        self._live: dict[str, int] = {}  # trial id -> HyperOpt's tid
        self.rstate = np.random.RandomState(random_state_seed)
        self._space: Any = None
        self._domain: Any = None
        self._trials = hpo.Trials()
        if isinstance(space, dict) and space:
            self._space = convert_search_space(space) if has_domains(space) else space
            self._setup()

    def _algo(self) -> Any:
        from functools import partial

        hpo = _hyperopt()
        kw: dict[str, Any] = {}
        if self._n_initial_points is not None:
            kw["n_startup_jobs"] = self._n_initial_points
        if self._gamma is not None:
            kw["gamma"] = self._gamma
        return partial(hpo.tpe.suggest, **kw)

    def _setup(self) -> None:
        from hyperopt.fmin import generate_trials_to_calculate

        hpo = _hyperopt()
        if self._points:
            # HyperOpt takes a choice's index; the user gives its value (as in Ray).
            points = [self._to_indices(copy.deepcopy(p), self._space) for p in self._points]
            self._trials = generate_trials_to_calculate(list(reversed(points)))
            self._trials.refresh()
            self._to_evaluate = len(points)
        self._domain = hpo.Domain(lambda spc: spc, self._space)

    def _to_indices(self, point: dict, space: dict) -> dict:
        hpo = _hyperopt()
        for key, value in point.items():
            expr = space.get(key) if isinstance(space, dict) else None
            if isinstance(value, dict) and isinstance(expr, dict):
                self._to_indices(value, expr)
            elif isinstance(expr, hpo.base.pyll.Apply) and expr.name == "switch":
                options = [a.obj for a in expr.pos_args[1:] if a.name == "literal"]
                if value not in options and isinstance(value, int) and 0 <= value < len(options):
                    continue  # Ray 0.8's spelling: the choice's index (the seed's example)
                if value not in options:
                    raise ValueError(
                        f"points_to_evaluate: {key}={value!r} is none of the choice's "
                        f"values {options}"
                    )
                point[key] = options.index(value)
        return point

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict) -> bool:
        if self._domain is not None:
            return False  # it has its own space (and metric/mode from its constructor)
        self._space = convert_search_space(config) if has_domains(config) else None
        self._metric = metric or self._metric
        self._mode = mode or self._mode
        if self._space:
            self._setup()
        return True

    def check_ready(self) -> None:
        try:
            check_ready(self, self._domain is not None)
        except ValueError as e:
            if self._domain is None:
                raise ValueError(f"{e}{HYPEROPT_UNDEFINED_DETAILS}") from None
            raise

    def suggest(self, trial_id: str) -> dict | None:
        hpo = _hyperopt()
        self.check_ready()
        if self._to_evaluate > 0:
            new_trial = self._trials.trials[self._to_evaluate - 1]
            self._to_evaluate -= 1
        else:
            ids = self._trials.new_trial_ids(1)
            self._trials.refresh()
            docs = self._algo()(ids, self._domain, self._trials, self.rstate.randint(2**31 - 1))
            self._trials.insert_trial_docs(docs)
            self._trials.refresh()
            new_trial = docs[0]
        self._live[trial_id] = new_trial["tid"]
        # HyperOpt's point (choice indices, flat names) evaluated into the config's shape.
        point = hpo.base.spec_from_misc(new_trial["misc"])
        ctrl = hpo.base.Ctrl(self._trials, current_trial=new_trial)
        memo = self._domain.memo_from_config(point)
        hpo.utils.use_obj_for_literal_in_memo(self._domain.expr, ctrl, hpo.base.Ctrl, memo)
        config = hpo.pyll.rec_eval(self._domain.expr, memo=memo)
        return copy.deepcopy(config)  # the space's own (nested) shape, values filled in

    def _doc(self, trial_id: str) -> dict | None:
        tid = self._live.get(trial_id)
        if tid is None:
            return None
        return next((t for t in self._trials.trials if t["tid"] == tid), None)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        doc = self._doc(trial_id)
        if doc is not None:
            doc["book_time"] = doc["refresh_time"] = _hyperopt().utils.coarse_utcnow()

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        hpo = _hyperopt()
        doc = self._doc(trial_id)
        if doc is None:
            return
        doc["refresh_time"] = hpo.utils.coarse_utcnow()
        if error:
            doc["state"] = hpo.base.JOB_STATE_ERROR
            doc["misc"]["error"] = ("TuneError", "Tune Error")
        elif result:
            if self._metric not in result:
                raise RuntimeError(
                    f"Hyperopt expected to see the metric `{self._metric}` in the last result, "
                    "but it was not found. To fix this, make sure your call to `tune.report` "
                    "or your return value of your trainable class `step()` contains the "
                    "above metric as a key."
                )
            sign = -1.0 if self._mode == "max" else 1.0  # HyperOpt minimises a loss
            doc["state"] = hpo.base.JOB_STATE_DONE
            doc["result"] = {"loss": sign * result[self._metric], "status": "ok"}
        self._trials.refresh()
        del self._live[trial_id]

    def get_state(self) -> dict:
        # Ray's two keys, and the rest (which trial is which HyperOpt trial, what is still
        # to evaluate): a ConcurrencyLimiter saves its searcher through this.
        rest = {k: v for k, v in self.__dict__.items() if k not in ("rstate", "_trials")}
        return {"hyperopt_trials": self._trials, "rstate": self.rstate.get_state(), "rest": rest}

    def set_state(self, state: dict) -> None:
        self.__dict__.update(state.get("rest", {}))
        self._trials = state["hyperopt_trials"]
        self.rstate.set_state(state["rstate"])

    def save(self, checkpoint_path: str) -> None:
        path = Path(checkpoint_path)
        state = {k: v for k, v in self.__dict__.items() if k != "rstate"}
        state["__rstate"] = self.rstate.get_state()
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(cloudpickle.dumps(state))
        tmp.replace(path)

    def restore(self, checkpoint_path: str) -> None:
        state = cloudpickle.loads(Path(checkpoint_path).read_bytes())
        self.rstate.set_state(state.pop("__rstate"))
        self.__dict__.update(state)
