"""Search algorithms as the trial loop sees them: each hands out (trial_id, config, tag)
triples until finished. ``BasicVariantGenerator`` expands grids and samples domains itself;
``SearchGenerator`` adapts any ``Searcher`` (ConcurrencyLimiter, Optuna, ...)."""

from __future__ import annotations

import copy
import json
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember.tune.files import write_atomic
from ember.tune.search.sample import Rng
from ember.tune.search.searcher import Searcher
from ember.tune.search.variants import (
    count_grid,
    format_vars,
    generate_variants,
    hide_functions,
    resolve_functions,
)


@dataclass
class Suggestion:
    trial_id: str
    config: dict
    experiment_tag: str
    # The sampled values by "/"-joined path (Ray's evaluated_params: TensorBoard's hparams).
    evaluated_params: dict = field(default_factory=dict)


def flatten_resolved(resolved: dict) -> dict:
    out = {}
    for path, value in resolved.items():
        pieces = path[1:] if path and path[0] == "config" else path
        out["/".join(str(p) for p in pieces)] = value
    return out


def _deep_update(base: dict, update: dict) -> dict:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _deep_update(base[k], v)
        else:
            base[k] = v
    return base


class SearchAlgorithm:
    """What the loop calls. ``next_trial`` returns None when nothing is ready now."""

    finished = False

    def set_search_properties(
        self, metric: str | None, mode: str | None, param_space: dict, num_samples: int
    ) -> bool:
        raise NotImplementedError

    def next_trial(self) -> Suggestion | None:
        raise NotImplementedError

    def total_samples(self) -> int | None:
        return None

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        pass

    def on_trial_complete(self, trial_id: str, result: dict | None, error: bool) -> None:
        pass

    # The experiment's directory keeps the search's state beside the trials' (a restored
    # experiment goes on from it). A grid/random search needs none: it is replayed.
    def save_to_dir(self, experiment_dir: Path) -> None:
        pass

    def restore_from_dir(self, experiment_dir: Path) -> bool:
        return False


SEARCHER_FILE = "searcher-state.pkl"
GENERATOR_FILE = "search_gen_state.json"


class BasicVariantGenerator(SearchAlgorithm):
    """Grid search crossed with random sampling, num_samples times, in Ray's order.

    ``points_to_evaluate``: configs (partial ones are completed from the space) tried first,
    each replacing one of the num_samples. ``random_state``: a seed or NumPy generator for
    reproducible samples. ``max_concurrent``: 0 is unlimited. ``shuffle`` (Ray 0.8): each
    sample's grid points in a random order.
    """

    def __init__(
        self,
        points_to_evaluate: list[dict] | None = None,
        max_concurrent: int = 0,
        constant_grid_search: bool = False,
        random_state: Any = None,
        shuffle: bool = False,
    ) -> None:
        if constant_grid_search:
            raise NotImplementedError(
                "constant_grid_search=True is not supported yet: domains are sampled per "
                "grid point (the default)"
            )
        self.points = [copy.deepcopy(p) for p in (points_to_evaluate or [])]
        self.max_concurrent = max_concurrent
        self.shuffle = shuffle
        self.rng = Rng(random_state)
        self.prefix = uuid.uuid1().hex[:5] + "_"
        self.counter = 0
        self.live: set[str] = set()
        self._iter: Iterator[tuple[dict, dict]] | None = None
        self._total = 0

    def set_search_properties(
        self, metric: str | None, mode: str | None, param_space: dict, num_samples: int
    ) -> bool:
        if num_samples < 1 and num_samples != -1:
            raise ValueError(f"num_samples must be a positive integer or -1, got {num_samples}")
        spec = {"config": hide_functions(param_space)}
        self._total = (
            -1 if num_samples == -1 else count_grid(spec) * max(num_samples - len(self.points), 0)
        )
        if num_samples != -1:
            self._total += sum(
                count_grid({"config": _deep_update(copy.deepcopy(param_space), p)})
                for p in self.points[:num_samples]
            )
        self._iter = self._variants(spec, num_samples)
        return True

    def _variants(self, spec: dict, num_samples: int) -> Iterator[tuple[dict, dict]]:
        sample = 0
        while num_samples == -1 or sample < num_samples:
            this = spec
            if sample < len(self.points):
                this = {"config": _deep_update(copy.deepcopy(spec["config"]), self.points[sample])}
            if self.shuffle:
                variants = list(generate_variants(this, self.rng))
                order = self.rng.permutation(len(variants))
                yield from (variants[i] for i in order)
            else:
                yield from generate_variants(this, self.rng)
            sample += 1

    def total_samples(self) -> int | None:
        return None if self._total < 0 else self._total

    def __getstate__(self) -> dict:
        # The running expansion is a generator: not saved; set_search_properties remakes it.
        return {k: v for k, v in self.__dict__.items() if k != "_iter"} | {"_iter": None}

    def next_trial(self) -> Suggestion | None:
        if self.finished or self._iter is None:
            return None
        if self.max_concurrent and len(self.live) >= self.max_concurrent:
            return None
        try:
            resolved, spec = next(self._iter)
        except StopIteration:
            self.finished = True
            return None
        trial_id = f"{self.prefix}{self.counter:05d}"
        tag = str(self.counter)
        if resolved:
            tag += "_" + format_vars(resolved)
        self.counter += 1
        self.live.add(trial_id)
        return Suggestion(
            trial_id, resolve_functions(spec["config"]), tag, flatten_resolved(resolved)
        )

    def on_trial_complete(self, trial_id: str, result: dict | None, error: bool) -> None:
        self.live.discard(trial_id)


def _flatten(config: dict, prefix: tuple = ()) -> dict:
    out: dict = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(_flatten(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out


class SearchGenerator(SearchAlgorithm):
    """A Searcher behind the loop's interface: asks it num_samples times (-1: until it says
    FINISHED)."""

    def __init__(self, searcher: Searcher) -> None:
        if not isinstance(searcher, Searcher):
            raise TypeError(
                f"search_alg must be a Searcher or SearchAlgorithm, got {type(searcher).__name__}"
            )
        self.searcher = searcher
        self.counter = 0
        self.num_samples = 1
        self.param_space: dict = {}
        # Bumped on every suggestion and every result told: the state is saved only when it
        # moved (and never again after a searcher that cannot be saved said so once).
        self.version = 0
        self.saved_version = 0
        self.can_save = True

    def set_search_properties(
        self, metric: str | None, mode: str | None, param_space: dict, num_samples: int
    ) -> bool:
        self.num_samples = num_samples
        self.param_space = param_space
        return self.searcher.set_search_properties(metric, mode, param_space)

    def _complete(self, suggested: dict) -> dict:
        """The suggestion over the Tuner's param_space, as Ray merges them: the space's
        constants kept, its sample_from functions run on the merged config."""
        if not self.param_space:
            return suggested
        merged = _deep_update(copy.deepcopy(self.param_space), copy.deepcopy(suggested))
        _, spec = next(generate_variants({"config": hide_functions(merged)}, None))
        return resolve_functions(spec["config"])

    def total_samples(self) -> int | None:
        return None if self.num_samples == -1 else self.num_samples

    def next_trial(self) -> Suggestion | None:
        if self.finished:
            return None
        if self.num_samples != -1 and self.counter >= self.num_samples:
            self.finished = True
            return None
        trial_id = uuid.uuid4().hex[:8]
        config = self.searcher.suggest(trial_id)
        if config == Searcher.FINISHED:
            self.finished = True
            return None
        if config is None:
            return None
        tag = f"{self.counter}_{format_vars(_flatten(config))}" if config else str(self.counter)
        self.counter += 1
        self.version += 1
        flat = {"/".join(str(p) for p in k): v for k, v in _flatten(config).items()}
        return Suggestion(trial_id, self._complete(config), tag, flat)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.version += 1
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None, error: bool) -> None:
        self.version += 1
        self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def save_to_dir(self, experiment_dir: Path) -> None:
        """The searcher (its own ``save``) and how far the generator got, each written
        atomically, at the same moment as the trials' state."""
        if not self.can_save or self.version == self.saved_version:
            return
        try:
            self.searcher.save(str(experiment_dir / SEARCHER_FILE))
        except Exception as e:  # noqa: BLE001 - an unsaveable searcher costs only the resume
            self.can_save = False
            print(
                f"ember.tune: {type(self.searcher).__name__}'s state cannot be saved ({e}); a "
                "restored experiment will ask it from scratch",
                file=sys.stderr,
                flush=True,
            )
            return
        state = {"counter": self.counter, "finished": self.finished}
        write_atomic(experiment_dir / GENERATOR_FILE, json.dumps(state).encode())
        self.saved_version = self.version

    def restore_from_dir(self, experiment_dir: Path) -> bool:
        searcher_file = experiment_dir / SEARCHER_FILE
        generator_file = experiment_dir / GENERATOR_FILE
        if not (searcher_file.exists() and generator_file.exists()):
            return False
        self.searcher.restore(str(searcher_file))
        state = json.loads(generator_file.read_text())
        self.counter, self.finished = state["counter"], state["finished"]
        return True
