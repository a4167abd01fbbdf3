"""Search-space domains: what a config value may be sampled from.

Each public constructor (``uniform``, ``choice``, ...) returns a ``Domain`` holding its bounds
and a sampler. Sampling uses NumPy's generators with the same calls Ray Tune makes, so a seeded
``BasicVariantGenerator(random_state=...)`` draws the same values as Ray's does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from copy import copy
from typing import Any

import numpy as np


class Rng:
    """One random source: a seed, a NumPy ``Generator`` or ``RandomState``, or None (NumPy's
    global state). ``integers`` is spelled ``randint`` on the legacy ``RandomState``."""

    def __init__(self, seed_or_generator: Any = None) -> None:
        if isinstance(seed_or_generator, Rng):
            seed_or_generator = seed_or_generator._rng
        if seed_or_generator is None or isinstance(
            seed_or_generator, np.random.RandomState | np.random.Generator
        ):
            self._rng = seed_or_generator
        else:
            self._rng = np.random.default_rng(seed_or_generator)

    @property
    def rng(self) -> Any:
        return self._rng if self._rng is not None else np.random

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_rng":
            # Not set yet (an Rng being unpickled): never look it up through itself.
            raise AttributeError(name)
        if not isinstance(self._rng, np.random.Generator):
            name = {"integers": "randint", "random": "rand"}.get(name, name)
        return getattr(self.rng, name)


def _one(domain: Domain, items: Any) -> Any:
    return items if len(items) > 1 else domain.cast(items[0])


class RecursiveDependencyError(Exception):
    """A ``sample_from`` read a value that is not resolved yet (tried again next pass)."""


class SpecView(dict):
    """The spec a ``sample_from`` function sees: ``spec.config.x`` reads, raising on a value
    that is still a domain so that the function is retried once that value is sampled."""

    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError as e:
            raise AttributeError(name) from e
        if isinstance(value, Domain) or (
            isinstance(value, dict) and len(value) == 1 and "grid_search" in value
        ):
            raise RecursiveDependencyError(f"`{name}` depends on the unresolved {value!r}")
        return SpecView(value) if isinstance(value, dict) else value


class Sampler:
    def sample(self, domain: Domain, config: Any, size: int, rng: Rng) -> Any:
        raise NotImplementedError


class Domain:
    """A range of values and how to sample it."""

    sampler: Sampler | None = None
    default_sampler: Callable[[], Sampler] | None = None

    def cast(self, value: Any) -> Any:
        return value

    def with_sampler(self, sampler: Sampler, override: bool = False) -> Domain:
        if self.sampler is not None and not override:
            raise ValueError(
                f"{type(self).__name__} already has a sampler ({type(self.sampler).__name__}); "
                "a domain is sampled one way"
            )
        new = copy(self)
        new.sampler = sampler
        return new

    def get_sampler(self) -> Sampler:
        if self.sampler is None:
            assert self.default_sampler is not None
            return self.default_sampler()
        return self.sampler

    def sample(self, config: Any = None, size: int = 1, random_state: Any = None) -> Any:
        rng = random_state if isinstance(random_state, Rng) else Rng(random_state)
        return self.get_sampler().sample(self, config=config, size=size, rng=rng)

    def is_grid(self) -> bool:
        return isinstance(self.sampler, Grid)

    def is_function(self) -> bool:
        return False

    @property
    def domain_str(self) -> str:
        return "(unknown)"

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self.domain_str}"


class Grid(Sampler):
    def sample(self, domain: Domain, config: Any, size: int, rng: Rng) -> Any:
        raise RuntimeError("a grid is expanded, never sampled")


class _FloatUniform(Sampler):
    def sample(self, domain: Domain, config: Any, size: int, rng: Rng) -> Any:
        if not (domain.lower > float("-inf") and domain.upper < float("inf")):
            raise ValueError("uniform needs finite lower and upper bounds")
        return _one(domain, rng.uniform(domain.lower, domain.upper, size=size))


class _FloatLogUniform(Sampler):
    def __init__(self, base: float = 10) -> None:
        self.base = base

    def sample(self, domain: Domain, config: Any, size: int, rng: Rng) -> Any:
        if not (domain.lower > 0 and 0 < domain.upper < float("inf")):
            raise ValueError("loguniform needs bounds greater than 0 (and a finite upper)")
        low, high = np.log(domain.lower), np.log(domain.upper)
        return _one(domain, np.exp(rng.uniform(low, high, size=size)))


class _FloatNormal(Sampler):
    def __init__(self, mean: float = 0.0, sd: float = 1.0) -> None:
        self.mean, self.sd = mean, sd

    def sample(self, domain: Domain, config: Any, size: int, rng: Rng) -> Any:
        return _one(domain, rng.normal(self.mean, self.sd, size=size))


class _IntUniform(Sampler):
    def sample(self, domain: Domain, config: Any, size: int, rng: Rng) -> Any:
        return _one(domain, rng.integers(domain.lower, domain.upper, size=size))


class _IntLogUniform(_FloatLogUniform):
    def sample(self, domain: Domain, config: Any, size: int, rng: Rng) -> Any:
        if not (domain.lower > 0 and 0 < domain.upper < float("inf")):
            raise ValueError("lograndint needs bounds greater than 0")
        low, high = np.log(domain.lower), np.log(domain.upper)
        items = np.floor(np.exp(rng.uniform(low, high, size=size))).astype(int)
        return _one(domain, items)


class _Choice(Sampler):
    def sample(self, domain: Domain, config: Any, size: int, rng: Rng) -> Any:
        # Indices, not rng.choice(categories): that would coerce mixed types to one dtype.
        indices = rng.choice(np.arange(0, len(domain.categories)), size=size)
        return _one(domain, [domain.categories[i] for i in indices])


class _Call(Sampler):
    def sample(self, domain: Domain, config: Any, size: int, rng: Rng) -> Any:
        if not domain.pass_config:
            return _one(domain, [domain.func() for _ in range(size)])
        configs = config if isinstance(config, list) else [config] * size
        return _one(domain, [self._call(domain, configs[i]) for i in range(size)])

    @staticmethod
    def _call(domain: Domain, config: Any) -> Any:
        try:
            return domain.func(config)
        except (AttributeError, KeyError):
            # The older spelling reads ``spec.config.x``: give it the spec around the config.
            if isinstance(config, dict) and "config" in config:
                raise
            return domain.func(SpecView({"config": config}))


class Quantized(Sampler):
    """Rounds another sampler's values to multiples of ``q``."""

    def __init__(self, sampler: Sampler, q: float) -> None:
        if not q:
            raise ValueError("q (the quantization step) must be non-zero")
        self.sampler, self.q = sampler, q

    def _index(self, bound: float, round_fn: Callable[[float], float]) -> float:
        # A bound already on the grid (up to float noise) stays; others round inwards.
        if not np.isfinite(bound):
            return bound
        scaled = bound / self.q
        nearest = round(scaled)
        return nearest if np.isclose(scaled, nearest) else round_fn(scaled)

    def sample(self, domain: Domain, config: Any, size: int, rng: Rng) -> Any:
        if isinstance(domain, Integer):
            # Sample grid indices so that every multiple of q is equally likely.
            low, high = (
                int(self._index(domain.lower, np.ceil)),
                int(self._index(domain.upper, np.floor)),
            )
            if high < low:
                raise ValueError(
                    f"no multiple of q={self.q} lies between {domain.lower} and {domain.upper}"
                )
            index_domain = copy(domain)
            index_domain.lower = low
            index_domain.upper = high + (0 if self.q == 1 else 1)  # upper is exclusive
            values = self.sampler.sample(index_domain, config, size, rng)
            quantized = np.multiply(values, self.q)
        else:
            inner = copy(domain)
            inner.lower = self._index(domain.lower, np.ceil) * self.q
            inner.upper = self._index(domain.upper, np.floor) * self.q
            values = self.sampler.sample(inner, config, size, rng)
            quantized = np.round(np.divide(values, self.q)) * self.q
        if not isinstance(quantized, np.ndarray):
            return domain.cast(quantized)
        return [domain.cast(x) for x in quantized]


class Float(Domain):
    default_sampler = _FloatUniform

    def __init__(self, lower: float | None, upper: float | None) -> None:
        self.lower = lower if lower is not None else float("-inf")
        self.upper = upper if upper is not None else float("inf")

    def cast(self, value: Any) -> float:
        return float(value)

    def uniform(self) -> Float:
        return self.with_sampler(_FloatUniform())

    def loguniform(self, base: float = 10) -> Float:
        return self.with_sampler(_FloatLogUniform(base))

    def normal(self, mean: float = 0.0, sd: float = 1.0) -> Float:
        return self.with_sampler(_FloatNormal(mean, sd))

    def quantized(self, q: float) -> Float:
        return self.with_sampler(Quantized(self.get_sampler(), q), override=True)

    def is_valid(self, value: Any) -> bool:
        return self.lower <= value <= self.upper

    @property
    def domain_str(self) -> str:
        return f"({self.lower}, {self.upper})"


class Integer(Float):
    default_sampler = _IntUniform

    def cast(self, value: Any) -> int:
        return int(value)

    def uniform(self) -> Integer:
        return self.with_sampler(_IntUniform())

    def loguniform(self, base: float = 10) -> Integer:
        return self.with_sampler(_IntLogUniform(base))


class Categorical(Domain):
    default_sampler = _Choice

    def __init__(self, categories: Sequence) -> None:
        self.categories = list(categories)

    def uniform(self) -> Categorical:
        return self.with_sampler(_Choice())

    def grid(self) -> Categorical:
        return self.with_sampler(Grid())

    def __len__(self) -> int:
        return len(self.categories)

    def __getitem__(self, i: int) -> Any:
        return self.categories[i]

    def is_valid(self, value: Any) -> bool:
        return value in self.categories

    @property
    def domain_str(self) -> str:
        return f"{self.categories}"


class Function(Domain):
    """``sample_from(func)``: func() or func(spec), where ``spec.config.x`` reads another
    sampled value (resolved first, in as many passes as the dependencies need)."""

    default_sampler = _Call

    def __init__(self, func: Callable) -> None:
        if not callable(func):
            raise TypeError(f"sample_from needs a function, got {type(func).__name__}")
        sig = inspect.signature(func)
        try:
            sig.bind({})
            self.pass_config = True
        except TypeError:
            try:
                sig.bind()
            except TypeError as e:
                raise ValueError(
                    "a sample_from function takes no argument or one (the spec); "
                    f"{func!r} takes neither"
                ) from e
            self.pass_config = False
        self.func = func

    def is_function(self) -> bool:
        return True

    @property
    def domain_str(self) -> str:
        return f"{self.func}()"


def uniform(lower: float, upper: float | None = None) -> Float:
    """A float in [lower, upper). With one bound, Ray 0.8's ``tune.uniform(x)`` (which was
    ``np.random.uniform(x)``): between x and 1.0."""
    if upper is None:
        lower, upper = sorted((float(lower), 1.0))
    return Float(lower, upper).uniform()


def quniform(lower: float, upper: float, q: float) -> Float:
    return Float(lower, upper).uniform().quantized(q)


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    return Float(lower, upper).loguniform(base)


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    return Float(lower, upper).loguniform(base).quantized(q)


def randn(mean: float = 0.0, sd: float = 1.0) -> Float:
    return Float(None, None).normal(mean, sd)


def qrandn(mean: float, sd: float, q: float) -> Float:
    return Float(None, None).normal(mean, sd).quantized(q)


def randint(lower: int, upper: int) -> Integer:
    """An integer in [lower, upper): upper is exclusive, as NumPy's."""
    return Integer(lower, upper).uniform()


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """A multiple of q in [lower, upper]: inclusive of upper (unlike randint)."""
    return Integer(lower, upper).uniform().quantized(q)


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    return Integer(lower, upper).loguniform(base)


def qlograndint(lower: int, upper: int, q: int, base: float = 10) -> Integer:
    return Integer(lower, upper).loguniform(base).quantized(q)


def choice(categories: Sequence) -> Categorical:
    if isinstance(categories, str) or not isinstance(categories, Sequence):
        raise TypeError(f"choice needs a list of options, got {categories!r}")
    if not categories:
        raise ValueError("choice needs at least one option")
    return Categorical(categories).uniform()


def sample_from(func: Callable) -> Function:
    return Function(func)


def grid_search(values: Sequence) -> dict[str, list]:
    """Every value is tried (times num_samples): ``{"grid_search": [...]}`` as in Ray."""
    if isinstance(values, str) or not hasattr(values, "__iter__"):
        raise TypeError(f"grid_search needs a list of values, got {values!r}")
    return {"grid_search": list(values)}
