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

    def reset(
        self, trainable_cls: type, config: dict, context: TrialContext, restore: dict | None
    ) -> bool:
        """Takes on another trial (``reuse_actors=True``): a class trainable keeps its
        instance if its ``reset_config`` says it can; a function trainable starts afresh in
        this process. False: this actor cannot take it (the controller makes a new one)."""
        old = self.trainable
        if type(old) is not trainable_cls:
            return False
        if getattr(trainable_cls, "_function", None) is not None:
            old.stop()
            self.trainable = trainable_cls(config, context)
        elif not old.reset(config, context):
            return False
        if restore:
            self.trainable.restore(restore["path"], restore["iteration"], restore["time_total"])
        return True

    def train(self) -> dict:
        return self.trainable.train()

    def train_buffered(self, most: int) -> list[dict]:
        """Up to ``most`` results in one call (function trainables only)."""
        return self.trainable.train_buffered(most)

    def save(self) -> str:
        return self.trainable.save()

    def stop(self) -> bool:
        self.trainable.stop()
        return True

    def ping(self) -> Any:
        return True
