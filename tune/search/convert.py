"""What the library-backed searchers (Optuna, HyperOpt) share: reading a Tune search space into
(path, what kind of domain) pairs they convert into their own, the errors Ray gives for what
cannot be converted, and the checks every such searcher makes before a trial starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember.tune.search import sample
from ember.tune.search.variants import _unresolved

# Ray's names for its samplers, which its conversion errors print (its classes are spelled
# so; Ember's own are private and named differently).
RAY_SAMPLER_NAMES = {
    sample._FloatUniform: "_Uniform",
    sample._IntUniform: "_Uniform",
    sample._Choice: "_Uniform",
    sample._FloatLogUniform: "_LogUniform",
    sample._IntLogUniform: "_LogUniform",
    sample._FloatNormal: "_Normal",
    sample._Call: "_CallSampler",
    sample.Quantized: "Quantized",
    sample.Grid: "Grid",
}

UNDEFINED_SEARCH_SPACE = (
    "Trying to sample a configuration from {cls}, but no search space has been defined. "
    "Either pass the `{space}` argument when instantiating the search algorithm, or pass a "
    "`param_space` to `tune.Tuner()`."
)
UNDEFINED_METRIC_MODE = (
    "Trying to sample a configuration from {cls}, but the `metric` ({metric}) or `mode` "
    "({mode}) parameters have not been set. Either pass these arguments when instantiating "
    "the search algorithm, or pass them to `tune.TuneConfig()`."
)


@dataclass
class Param:
    """One domain of a space, as a converter needs it."""

    path: tuple
    domain: sample.Domain
    kind: str  # float | int | choice | other
    sampler: str  # uniform | loguniform | normal | other
    q: float | None  # the quantization step, if any

    @property
    def name(self) -> str:
        return "/".join(str(p) for p in self.path)

    def unsupported(self, who: str) -> ValueError:
        """Ray's error for a domain the library cannot search (``who``: Ray's subject, "Optuna
        search" or "HyperOpt")."""
        raw = self.domain.sampler
        name = "NoneType" if raw is None else RAY_SAMPLER_NAMES.get(type(raw), type(raw).__name__)
        return ValueError(
            f"{who} does not support parameters of type "
            f"`{type(self.domain).__name__}` with samplers of type `{name}`"
        )


def _describe(path: tuple, domain: sample.Domain) -> Param:
    inner = domain.get_sampler()
    q = None
    if isinstance(inner, sample.Quantized):
        q, inner = inner.q, inner.sampler
    if isinstance(domain, sample.Integer):
        kind = "int"
    elif isinstance(domain, sample.Float):
        kind = "float"
    elif isinstance(domain, sample.Categorical):
        kind = "choice"
    else:
        kind = "other"
    if isinstance(inner, sample._FloatLogUniform):  # also the int one (a subclass)
        how = "loguniform"
    elif isinstance(inner, sample._FloatNormal):
        how = "normal"
    elif isinstance(inner, sample._FloatUniform | sample._IntUniform | sample._Choice):
        how = "uniform"
    else:
        how = "other"
    return Param(path, domain, kind, how, q)


def parse_space(space: dict, library: str) -> list[Param]:
    """The space's domains in its order; a grid_search is refused as Ray refuses it."""
    found = _unresolved(space)
    if any(domain.is_grid() for _, domain in found):
        raise ValueError(
            f"Grid search parameters cannot be automatically converted to "
            f"{'an' if library[0] in 'AEIOU' else 'a'} {library} search space."
        )
    return [_describe(path, domain) for path, domain in found]


def has_domains(space: Any) -> bool:
    return bool(_unresolved(space)) if isinstance(space, dict) else False


def unflatten(flat: dict) -> dict:
    """``{"a/b": 1}`` -> ``{"a": {"b": 1}}``: a searcher's names back into the config's shape."""
    out: dict = {}
    for key, value in flat.items():
        node = out
        parts = key.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def check_ready(searcher: Any, has_space: bool, space_arg: str = "space") -> None:
    """Raised before any trial starts (Ray raises the same texts at the first suggestion)."""
    cls = type(searcher).__name__
    if not has_space:
        raise ValueError(UNDEFINED_SEARCH_SPACE.format(cls=cls, space=space_arg))
    if not searcher.metric or not searcher.mode:
        raise ValueError(
            UNDEFINED_METRIC_MODE.format(cls=cls, metric=searcher.metric, mode=searcher.mode)
        )
