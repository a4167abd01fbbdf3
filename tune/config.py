"""The experiment's settings: TuneConfig (what to search), RunConfig (where and how to run),
CheckpointConfig and FailureConfig. Validated when made, so a bad value fails before any
trial starts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_RESULTS_DIR = "~/ember_results"


def default_storage_path() -> str:
    return str(Path(os.environ.get("EMBER_RESULTS_DIR") or DEFAULT_RESULTS_DIR).expanduser())


def _check_mode(mode: str | None) -> None:
    if mode is not None and mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")


@dataclass
class TuneConfig:
    metric: str | None = None
    mode: str | None = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: float | None = None
    reuse_actors: bool = False
    trial_name_creator: Any = None
    trial_dirname_creator: Any = None

    def __post_init__(self) -> None:
        _check_mode(self.mode)
        if not isinstance(self.num_samples, int) or (
            self.num_samples < 1 and self.num_samples != -1
        ):
            raise ValueError(
                f"num_samples must be a positive integer or -1, got {self.num_samples!r}"
            )
        if self.max_concurrent_trials is not None and (
            not isinstance(self.max_concurrent_trials, int) or self.max_concurrent_trials < 1
        ):
            raise ValueError(
                f"max_concurrent_trials must be a positive integer, got {self.max_concurrent_trials!r}"
            )
        if self.time_budget_s is not None:
            seconds = getattr(self.time_budget_s, "total_seconds", lambda: self.time_budget_s)()
            if not isinstance(seconds, int | float) or seconds <= 0:
                raise ValueError(
                    f"time_budget_s must be a positive number, got {self.time_budget_s!r}"
                )
            self.time_budget_s = float(seconds)


@dataclass
class CheckpointConfig:
    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool | None = None

    def __post_init__(self) -> None:
        if self.num_to_keep is not None and (
            not isinstance(self.num_to_keep, int) or self.num_to_keep < 1
        ):
            raise ValueError(
                f"num_to_keep must be a positive integer or None, got {self.num_to_keep!r}"
            )
        if self.checkpoint_score_order not in ("min", "max"):
            raise ValueError(
                f"checkpoint_score_order must be 'min' or 'max', got {self.checkpoint_score_order!r}"
            )
        if not isinstance(self.checkpoint_frequency, int) or self.checkpoint_frequency < 0:
            raise ValueError(
                f"checkpoint_frequency must be a non-negative integer, got {self.checkpoint_frequency!r}"
            )


@dataclass
class FailureConfig:
    max_failures: int = 0
    fail_fast: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.max_failures, int) or self.max_failures < -1:
            raise ValueError(f"max_failures must be an integer >= -1, got {self.max_failures!r}")


@dataclass
class RunConfig:
    name: str | None = None
    storage_path: str | None = None
    stop: Any = None
    callbacks: list | None = None
    checkpoint_config: CheckpointConfig = field(default_factory=CheckpointConfig)
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    verbose: int | None = None
    log_to_file: bool = False
    progress_reporter: Any = None  # a tune.CLIReporter / JupyterNotebookReporter

    def __post_init__(self) -> None:
        if self.verbose is not None and self.verbose not in (0, 1, 2, 3):
            raise ValueError(f"verbose must be 0, 1, 2 or 3, got {self.verbose!r}")
        self._defaults()

    def _defaults(self) -> None:
        if self.checkpoint_config is None:
            self.checkpoint_config = CheckpointConfig()
        if self.failure_config is None:
            self.failure_config = FailureConfig()
        if self.name is not None and (
            not self.name or "/" in self.name or self.name in (".", "..")
        ):
            raise ValueError(f"RunConfig name must be a plain directory name, got {self.name!r}")
