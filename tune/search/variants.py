"""Expanding a param space into concrete configs: grid values crossed with num_samples, random
domains sampled, ``sample_from`` functions evaluated after the values they read.

Orders follow Ray Tune's so the same space yields the same trials in the same order: grid keys
sorted by path, the first sorted key varying fastest; domains resolved per grid variant.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

from ember.tune.search.sample import (
    Categorical,
    Domain,
    Function,
    RecursiveDependencyError,
    SpecView,
)

Path = tuple
MAX_PASSES = 100  # sample_from chains deeper than this are a cycle, not a dependency


def _is_grid_dict(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "grid_search" in value


def _unresolved(spec: Any, prefix: Path = ()) -> list[tuple[Path, Domain]]:
    found: list[tuple[Path, Domain]] = []
    if isinstance(spec, dict):
        if _is_grid_dict(spec):
            values = spec["grid_search"]
            if not isinstance(values, list | tuple):
                raise ValueError(
                    f"grid_search at {'/'.join(map(str, prefix))} needs a list, got {values!r}"
                )
            return [(prefix, Categorical(values).grid())]
        if len(spec) == 1 and "eval" in spec and isinstance(spec["eval"], str):
            # Ray's JSON spelling of sample_from is not evaluated: eval of config text is unsafe.
            raise ValueError(
                f"{'/'.join(map(str, prefix))}: {{'eval': ...}} is not supported; "
                "use tune.sample_from(lambda spec: ...)"
            )
        for k, v in spec.items():
            found += _unresolved(v, prefix + (k,))
    elif isinstance(spec, list | tuple):
        for i, v in enumerate(spec):
            found += _unresolved(v, prefix + (i,))
    elif isinstance(spec, Domain):
        found.append((prefix, spec))
    return found


def _assign(spec: Any, path: Path, value: Any) -> None:
    for key in path[:-1]:
        spec = spec[key]
    if isinstance(spec, tuple):
        raise ValueError(f"cannot resolve a search space inside a tuple at {path}")
    spec[path[-1]] = value


def _get(spec: Any, path: Path) -> Any:
    for key in path:
        spec = spec[key]
    return spec


def _resolve_domains(spec: dict, domains: list[tuple[Path, Domain]], rng: Any) -> dict:
    resolved: dict[Path, Any] = {}
    error: Exception | None = RecursiveDependencyError("unresolved")
    passes = 0
    while error is not None and passes < MAX_PASSES:
        passes += 1
        error = None
        for path, domain in domains:
            if path in resolved:
                continue
            try:
                value = domain.sample(SpecView(spec), random_state=rng)
            except RecursiveDependencyError as e:
                error = e
                continue
            except Exception as e:
                where = "/".join(str(p) for p in path)
                raise ValueError(f"could not sample {where} from {domain!r}: {e}") from e
            _assign(spec, path, value)
            resolved[path] = value
    if error is not None:
        raise ValueError(f"sample_from values depend on each other in a cycle: {error}")
    return resolved


def _grid_specs(spec: dict, grid: list[tuple[Path, Domain]]) -> Iterator[dict]:
    if not grid:
        yield spec
        return
    indices = [0] * len(grid)
    while True:
        variant = copy.deepcopy(spec)
        for (path, domain), i in zip(grid, indices, strict=True):
            _assign(variant, path, domain.categories[i])
        yield variant
        # An odometer whose first wheel turns fastest.
        for wheel in range(len(grid)):
            indices[wheel] += 1
            if indices[wheel] < len(grid[wheel][1].categories):
                break
            indices[wheel] = 0
        else:
            return


def generate_variants(spec: dict, random_state: Any = None) -> Iterator[tuple[dict, dict]]:
    """Yields (resolved values by path, resolved spec) for one sample of every grid point.

    ``random_state`` is handed to each draw as given: an ``Rng`` advances across draws, while a
    bare seed restarts at every draw (as in Ray)."""
    rng = random_state
    spec = copy.deepcopy(spec)
    unresolved = _unresolved(spec)
    if not unresolved:
        yield {}, spec
        return
    grid = sorted(((p, d) for p, d in unresolved if d.is_grid()), key=lambda pd: pd[0])
    domains = [(p, d) for p, d in unresolved if not d.is_grid()]
    for empty in (g for g in grid if not g[1].categories):
        raise ValueError(f"grid_search at {'/'.join(map(str, empty[0]))} has no values")
    for variant in _grid_specs(spec, grid):
        resolved = _resolve_domains(variant, domains, rng)
        # A grid value may itself hold a search space (nested): resolve that level too.
        for inner, full in generate_variants(variant, rng):
            values = dict(resolved)
            for path, _ in grid:
                values[path] = _get(full, path)
            values.update(inner)
            yield values, full


def count_grid(spec: dict) -> int:
    n = 1
    for _, domain in _unresolved(spec):
        if domain.is_grid():
            n *= len(domain.categories)
    return n


def _clean(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return re.sub(r"[^a-zA-Z0-9_-]+", "_", str(value)).strip("_")


def format_vars(resolved: dict) -> str:
    """The trial-name tag Ray writes: ``last_key=value`` pairs sorted by path."""
    items = {k: v for k, v in resolved.items() if k not in ("run", "env", "resources_per_trial")}
    return ",".join(f"{_clean(k[-1])}={_clean(v)}" for k, v in sorted(items.items()))


class FunctionPlaceholder:
    """Stands for a ``sample_from`` while grids and random domains are expanded: as in Ray's
    Tuner, such functions run last, on the otherwise resolved config, and stay out of the
    trial's name."""

    def __init__(self, function: Function) -> None:
        self.function = function


def hide_functions(space: Any) -> Any:
    if isinstance(space, Function):
        return FunctionPlaceholder(space)
    if isinstance(space, dict):
        return {k: hide_functions(v) for k, v in space.items()}
    if isinstance(space, list):
        return [hide_functions(v) for v in space]
    if isinstance(space, Categorical):
        new = copy.copy(space)
        new.categories = [hide_functions(v) for v in space.categories]
        return new
    return space


def resolve_functions(config: Any, root: dict | None = None) -> Any:
    """Replaces each placeholder with its function's value, computed from ``root`` (the
    whole config), in the config's order."""
    root = config if root is None else root
    if isinstance(config, dict):
        for k, v in config.items():
            if isinstance(v, FunctionPlaceholder):
                config[k] = v.function.sample(config=root)
            else:
                resolve_functions(v, root)
    elif isinstance(config, list):
        for i, v in enumerate(config):
            if isinstance(v, FunctionPlaceholder):
                config[i] = v.function.sample(config=root)
            else:
                resolve_functions(v, root)
    return config
