"""A trial's record: identity, config, status and what the loop knows of its progress.
Plain data, JSON round-trippable, so the experiment's state file can hold every trial."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

PENDING, RUNNING, PAUSED, TERMINATED, ERROR = "PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR"
STATUSES = (PENDING, RUNNING, PAUSED, TERMINATED, ERROR)


@dataclass
class Trial:
    trial_id: str
    config: dict
    experiment_tag: str
    trainable_name: str
    dirname: str = ""
    status: str = PENDING
    last_result: dict = field(default_factory=dict)
    # metric -> {"last": v, "min": v, "max": v}: the Tune view's "last and best" without
    # reading progress files.
    metric_analysis: dict = field(default_factory=dict)
    # (checkpoint directory name, its score): kept ones, oldest first.
    checkpoints: list = field(default_factory=list)
    # checkpoint directory name -> [training_iteration, time_total_s] it was taken at.
    checkpoint_points: dict = field(default_factory=dict)
    latest_checkpoint: str | None = None
    checkpoint_iteration: int = 0
    checkpoint_time_total: float = 0.0
    num_failures: int = 0
    error_msg: str | None = None
    start_time: float | None = None
    stop_requested: bool = False
    runs: int = 0  # how many actors this trial has had (restarts and resumes add one)
    experiment_dir: str = ""
    # Set by a scheduler that moves the trial onto another trial's checkpoint (PBT's exploit):
    # the next start restores from there, not from the trial's own latest checkpoint.
    restore_path: str | None = None
    restore_iteration: int = 0
    restore_time_total: float = 0.0
    perturbations: list = field(default_factory=list)
    # The values the search sampled, by "/"-joined path (TensorBoard's hparams, as Ray's).
    evaluated_params: dict = field(default_factory=dict)
    # What tune.run(trial_name_creator=...) named the trial (its name and directory).
    custom_name: str | None = None

    def __str__(self) -> str:
        if self.custom_name is not None:
            return self.custom_name
        return f"{self.trainable_name}_{self.trial_id}"

    @property
    def trial_name(self) -> str:
        return str(self)

    @property
    def local_path(self) -> str | None:
        return f"{self.experiment_dir}/{self.dirname}" if self.dirname else None

    path = logdir = local_path

    @property
    def is_finished(self) -> bool:
        return self.status in (TERMINATED, ERROR)

    def update_metrics(self, result: dict) -> None:
        # In memory the last result also names the trial's tag (as Ray's); the files do not.
        self.last_result = {**result, "experiment_tag": self.experiment_tag}
        for key, value in result.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            seen = self.metric_analysis.get(key)
            if seen is None:
                self.metric_analysis[key] = {"last": value, "min": value, "max": value}
            else:
                seen["last"] = value
                seen["min"] = min(seen["min"], value)
                seen["max"] = max(seen["max"], value)

    def to_json(self) -> dict[str, Any]:
        """Its fields as they are, not copied (``asdict`` deep-copies every nested value:
        the experiment state of 1,000 trials spent most of a run there). For writing out
        at once, not for keeping."""
        return {name: getattr(self, name) for name in _FIELD_NAMES}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trial:
        return cls(**data)


_FIELD_NAMES = tuple(f.name for f in fields(Trial))
