"""The Ember actor a trial runs in: it holds one Trainable (a class trainable, or the wrapper
of a function) and answers train / save / stop."""

from __future__ import annotations

from typing import Any

from ember.tune.trainable.session import TrialContext


class TuneTrial:
    def __init__(
        self, trainable_cls: type, config: dict, context: TrialContext, restore: dict | None
    ) -> None:
        self.trainable = trainable_cls(config, context)
        if restore:
            self.trainable.restore(restore["path"], restore["iteration"], restore["time_total"])

    def train(self) -> dict:
        return self.trainable.train()

    def save(self) -> str:
        return self.trainable.save()

    def stop(self) -> bool:
        self.trainable.stop()
        return True

    def ping(self) -> Any:
        return True
