"""``tune.Callback``: hooks the controller calls as the experiment runs (driver side)."""

from __future__ import annotations

from typing import Any


class Callback:
    def setup(self, **info: Any) -> None:
        pass

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        pass

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        pass

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        pass

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        pass

    def on_checkpoint(
        self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any
    ) -> None:
        pass

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        """After every turn of the experiment's loop (at least every 0.2 s while it runs)."""

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        pass
