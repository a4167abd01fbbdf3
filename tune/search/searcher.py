"""The Searcher interface (a source of configs that learns from results) and ConcurrencyLimiter.

A searcher is told the metric and mode, asked ``suggest(trial_id)`` for a config (a dict, None
for "nothing now", or ``Searcher.FINISHED``), and told every result and every ending.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import cloudpickle


class Searcher:
    FINISHED = "FINISHED"

    def __init__(
        self,
        metric: str | None = None,
        mode: str | None = None,
        max_concurrent: int | None = None,
        use_early_stopped_trials: bool | None = None,  # Ray 0.8's, deprecated there: no effect
    ) -> None:
        if max_concurrent is not None:
            raise ValueError(
                "Searcher(max_concurrent=...) was deprecated in Ray 0.8.5 and is not taken: "
                "wrap the searcher, ConcurrencyLimiter(searcher, max_concurrent=N)"
            )
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        self._metric = metric
        self._mode = mode

    @property
    def metric(self) -> str | None:
        return self._metric

    @property
    def mode(self) -> str | None:
        return self._mode

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict) -> bool:
        """Fills in metric/mode from the TuneConfig when the searcher was built without them;
        returns False if it cannot take them (then the experiment fails before any trial)."""
        if self._metric is None and metric is not None:
            self._metric = metric
        if self._mode is None and mode is not None:
            self._mode = mode
        return True

    def suggest(self, trial_id: str) -> dict | str | None:
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        pass

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        pass

    def add_evaluated_point(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot take evaluated points")

    # Saving is pickling the whole searcher unless a subclass knows better.
    def get_state(self) -> dict:
        return dict(self.__dict__)

    def set_state(self, state: dict) -> None:
        self.__dict__.update(state)

    def save(self, checkpoint_path: str) -> None:
        path = Path(checkpoint_path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(cloudpickle.dumps(self.get_state()))  # a space may hold lambdas
        tmp.replace(path)  # atomic: a crash never leaves half a searcher

    def restore(self, checkpoint_path: str) -> None:
        self.set_state(pickle.loads(Path(checkpoint_path).read_bytes()))


class WrapsSearcher(Searcher):
    """A searcher around another (``self.searcher``): its state is its own fields plus the
    wrapped searcher's state, so a restored experiment restores both."""

    searcher: Searcher

    def get_state(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k != "searcher"}
        state["searcher"] = self.searcher.get_state()
        return state

    def set_state(self, state: dict) -> None:
        state = dict(state)
        self.searcher.set_state(state.pop("searcher"))
        self.__dict__.update(state)


class ConcurrencyLimiter(WrapsSearcher):
    """At most ``max_concurrent`` suggestions of the wrapped searcher live at once."""

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False) -> None:
        if not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ValueError(f"max_concurrent must be a positive integer, got {max_concurrent!r}")
        self.searcher = searcher
        self.max_concurrent = max_concurrent
        self.batch = batch
        self.live: set[str] = set()
        self.cached: list[tuple[str, dict | None, bool]] = []
        super().__init__(searcher.metric, searcher.mode)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return ok

    def suggest(self, trial_id: str) -> dict | str | None:
        if len(self.live) >= self.max_concurrent:
            return None
        suggestion = self.searcher.suggest(trial_id)
        if isinstance(suggestion, dict):
            self.live.add(trial_id)
        return suggestion

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self.live:
            self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        if trial_id not in self.live:
            return
        if not self.batch:
            self.live.discard(trial_id)
            self.searcher.on_trial_complete(trial_id, result=result, error=error)
            return
        # batch: the wrapped searcher hears of a batch's endings together, when all ended.
        self.cached.append((trial_id, result, error))
        if len(self.cached) == len(self.live):
            for tid, res, err in self.cached:
                self.searcher.on_trial_complete(tid, result=res, error=err)
            self.live.clear()
            self.cached.clear()
