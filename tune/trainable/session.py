"""What a trainable calls from inside its trial: ``tune.report``, ``tune.get_checkpoint``,
``tune.get_context``, and the older ``tune.track.log`` / ``reporter(**metrics)``.

A trial's actor serves one trial, so the session is one module-level value in its process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember.tune.checkpoint import Checkpoint


@dataclass
class TrialContext:
    trial_id: str
    trial_name: str
    experiment_name: str
    trial_dir: str
    trial_resources: Any = None

    def get_trial_id(self) -> str:
        return self.trial_id

    def get_trial_name(self) -> str:
        return self.trial_name

    def get_experiment_name(self) -> str:
        return self.experiment_name

    def get_trial_dir(self) -> str:
        return self.trial_dir

    def get_trial_resources(self) -> Any:
        return self.trial_resources

    # ray.train.get_context()'s distributed view: a Tune trial is one worker of one.
    def get_world_size(self) -> int:
        return 1

    def get_world_rank(self) -> int:
        return 0

    def get_local_rank(self) -> int:
        return 0

    def get_local_world_size(self) -> int:
        return 1

    def get_node_rank(self) -> int:
        return 0


class Session:
    """Implemented by the function trainable's runner."""

    context: TrialContext
    checkpoint: Checkpoint | None = None

    def report(self, metrics: dict, checkpoint: Checkpoint | None = None) -> None:
        raise NotImplementedError


_session: Session | None = None


def set_session(session: Session | None) -> None:
    global _session
    _session = session


def _current(what: str) -> Session:
    if _session is None:
        raise RuntimeError(
            f"tune.{what}() is called from inside a trial (a function passed to Tuner or "
            "tune.run); here there is no trial running"
        )
    return _session


def report(metrics: dict, *, checkpoint: Checkpoint | None = None) -> None:
    if not isinstance(metrics, dict):
        raise TypeError(f"tune.report takes a dict of metrics, got {type(metrics).__name__}")
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise TypeError(f"checkpoint must be a tune.Checkpoint, got {type(checkpoint).__name__}")
    _current("report").report(dict(metrics), checkpoint)


def get_checkpoint() -> Checkpoint | None:
    return _current("get_checkpoint").checkpoint


def get_context() -> TrialContext:
    return _current("get_context").context


class _Track:
    """Ray 0.8's ``tune.track``: ``log(**metrics)`` and what the trial is (its directory,
    name and id; None outside a trial, as in Ray)."""

    @staticmethod
    def log(**metrics: Any) -> None:
        _current("track.log").report(metrics, None)

    @staticmethod
    def trial_dir() -> str | None:
        return _session.context.trial_dir if _session is not None else None

    @staticmethod
    def trial_name() -> str | None:
        return _session.context.trial_name if _session is not None else None

    @staticmethod
    def trial_id() -> str | None:
        return _session.context.trial_id if _session is not None else None

    @staticmethod
    def shutdown() -> None:
        """Nothing to clean up: the trial's session ends with its function."""


track = _Track()


class Reporter:
    """The ``reporter`` of ``def train(config, reporter)``: ``reporter(**metrics)``
    (``done=True`` ends the trial with that result)."""

    def __call__(self, _metric: Any = None, **metrics: Any) -> None:
        if _metric is not None:
            metrics["_metric"] = _metric
        _current("reporter").report(metrics, None)
