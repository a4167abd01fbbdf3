"""``Repeater``: each configuration the wrapped searcher suggests runs ``repeat`` times, and the
searcher is told the mean of the repeats' final metric once they have all ended (one trial
among them stands for the group). ``set_index`` puts each repeat's index in its config under
``__trial_index__`` (a seed per repeat)."""

from __future__ import annotations

import copy

import numpy as np
from ember.tune.search.searcher import Searcher, WrapsSearcher

TRIAL_INDEX = "__trial_index__"


class _Group:
    def __init__(self, primary: str, config: dict, size: int) -> None:
        self.primary = primary
        self.config = config
        self.size = size
        self.members: list[str] = []
        self.scores: dict[str, float | None] = {}

    def full(self) -> bool:
        return len(self.members) >= self.size


class Repeater(WrapsSearcher):
    def __init__(self, searcher: Searcher, repeat: int = 1, set_index: bool = True) -> None:
        if not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"repeat must be a positive integer, got {repeat!r}")
        self.searcher = searcher
        self.repeat = repeat
        self.set_index = set_index
        self.current: _Group | None = None
        self.groups: dict[str, _Group] = {}  # trial id -> its group
        super().__init__(searcher.metric, searcher.mode)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return ok

    def suggest(self, trial_id: str) -> dict | str | None:
        if self.current is None or self.current.full():
            config = self.searcher.suggest(trial_id)
            if not isinstance(config, dict):
                return config
            self.current = _Group(trial_id, config, self.repeat)
        group = self.current
        config = copy.deepcopy(group.config)
        if self.set_index:
            config[TRIAL_INDEX] = len(group.members)
        group.members.append(trial_id)
        self.groups[trial_id] = group
        return config

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        group = self.groups.pop(trial_id, None)
        if group is None:
            return
        value = (result or {}).get(self._metric) if not error else None
        group.scores[trial_id] = value
        if len(group.scores) < group.size:
            return
        values = [v for v in group.scores.values() if v is not None]
        if values:
            averaged = {self._metric: float(np.mean(values))}
            self.searcher.on_trial_complete(group.primary, result=averaged)
        else:
            self.searcher.on_trial_complete(group.primary, error=True)
