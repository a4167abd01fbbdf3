"""A deployment's settings and their checks (Ray Serve 2.x's names and defaults).

Every field is checked when the deployment is declared, so a typo or a wrong type is an error
at ``@serve.deployment`` / ``.options()`` / ``serve deploy``, naming the field and what it
takes, never a replica that fails later on the cluster.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

# Ray Serve 2.60's defaults (ray/serve/_private/constants.py), so a program behaves the same.
DEFAULT_MAX_ONGOING_REQUESTS = 5
DEFAULT_TARGET_ONGOING_REQUESTS = 2.0
DEFAULT_HEALTH_CHECK_PERIOD_S = 10.0
DEFAULT_HEALTH_CHECK_TIMEOUT_S = 30.0
DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S = 20.0
DEFAULT_GRACEFUL_SHUTDOWN_WAIT_LOOP_S = 2.0
# Ray's default is unbounded (-1); Ember bounds every queue, so a handle that finds every
# replica full waits in a queue of at most this many requests, then fails clearly.
DEFAULT_MAX_QUEUED_REQUESTS = 1000


class ConfigError(ValueError):
    """A setting that is not valid; the message names it and what it takes."""


@dataclass
class AutoscalingConfig:
    min_replicas: int = 1
    max_replicas: int = 1
    initial_replicas: int | None = None
    target_ongoing_requests: float = DEFAULT_TARGET_ONGOING_REQUESTS
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    upscaling_factor: float | None = None
    downscaling_factor: float | None = None
    metrics_interval_s: float = 10.0
    look_back_period_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("min_replicas", "max_replicas"):
            _whole(f"autoscaling_config.{name}", getattr(self, name), minimum=0)
        if self.initial_replicas is not None:
            _whole("autoscaling_config.initial_replicas", self.initial_replicas, minimum=0)
        if self.max_replicas < max(self.min_replicas, 1):
            raise ConfigError(
                f"autoscaling_config.max_replicas ({self.max_replicas}) must be >= 1 and >= "
                f"min_replicas ({self.min_replicas})"
            )
        if self.initial_replicas is not None and not (
            self.min_replicas <= self.initial_replicas <= self.max_replicas
        ):
            raise ConfigError(
                "autoscaling_config.initial_replicas must lie between min_replicas and "
                f"max_replicas, got {self.initial_replicas}"
            )
        for name in ("target_ongoing_requests", "upscale_delay_s", "downscale_delay_s"):
            _number(f"autoscaling_config.{name}", getattr(self, name), positive=name[0] == "t")
        for name in ("upscaling_factor", "downscaling_factor"):
            if getattr(self, name) is not None:
                _number(f"autoscaling_config.{name}", getattr(self, name), positive=True)

    @classmethod
    def parse(cls, value: Any) -> AutoscalingConfig | None:
        if value is None or isinstance(value, AutoscalingConfig):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"autoscaling_config must be a dict, got {value!r}")
        return cls(**_known(cls, value, "autoscaling_config"))


@dataclass
class DeploymentConfig:
    """What the controller needs to run one deployment's replicas (not its code)."""

    num_replicas: int | str | None = None  # None: 1, unless autoscaling_config is set
    max_ongoing_requests: int = DEFAULT_MAX_ONGOING_REQUESTS
    max_queued_requests: int = DEFAULT_MAX_QUEUED_REQUESTS
    user_config: Any = None
    autoscaling_config: AutoscalingConfig | None = None
    health_check_period_s: float = DEFAULT_HEALTH_CHECK_PERIOD_S
    health_check_timeout_s: float = DEFAULT_HEALTH_CHECK_TIMEOUT_S
    graceful_shutdown_timeout_s: float = DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S
    graceful_shutdown_wait_loop_s: float = DEFAULT_GRACEFUL_SHUTDOWN_WAIT_LOOP_S
    ray_actor_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.autoscaling_config = AutoscalingConfig.parse(self.autoscaling_config)
        if self.num_replicas == "auto":  # Ray's shorthand for autoscaling with defaults
            self.num_replicas = None
            self.autoscaling_config = self.autoscaling_config or AutoscalingConfig(
                min_replicas=1, max_replicas=100
            )
        if self.num_replicas is not None:
            _whole("num_replicas", self.num_replicas, minimum=0)
            if self.autoscaling_config is not None:
                raise ConfigError(
                    "num_replicas and autoscaling_config cannot both be set: "
                    "autoscaling decides the number of replicas"
                )
        elif self.autoscaling_config is None:
            self.num_replicas = 1
        _whole("max_ongoing_requests", self.max_ongoing_requests, minimum=1)
        if self.max_queued_requests != -1:
            _whole("max_queued_requests", self.max_queued_requests, minimum=1)
        for name in (
            "health_check_period_s",
            "health_check_timeout_s",
            "graceful_shutdown_timeout_s",
            "graceful_shutdown_wait_loop_s",
        ):
            _number(name, getattr(self, name), positive=False)
        if not isinstance(self.ray_actor_options, dict):
            raise ConfigError(f"ray_actor_options must be a dict, got {self.ray_actor_options!r}")
        if self.user_config is not None:
            try:
                json.dumps(self.user_config)
            except TypeError as e:
                raise ConfigError(f"user_config must be JSON-serializable: {e}") from None

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)}

    def replaced(self, **changes: Any) -> DeploymentConfig:
        merged = dataclasses.asdict(self)
        merged.update(changes)
        if "num_replicas" in changes and "autoscaling_config" not in changes:
            merged["autoscaling_config"] = None
        if "autoscaling_config" in changes and "num_replicas" not in changes:
            merged["num_replicas"] = None
        return DeploymentConfig(**merged)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def initial_target(self) -> int:
        a = self.autoscaling_config
        if a is None:
            return int(self.num_replicas or 0)
        return a.initial_replicas if a.initial_replicas is not None else a.min_replicas


def _known(cls: type, values: dict, where: str) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(unknown)}; valid fields: {', '.join(sorted(names))}"
        )
    return values


def _whole(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be a whole number >= {minimum}, got {value!r}")


def _number(name: str, value: Any, positive: bool) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or value < 0 or (positive and value == 0):
        raise ConfigError(f"{name} must be a number {'> 0' if positive else '>= 0'}, got {value!r}")


def deployment_config(**kwargs: Any) -> DeploymentConfig:
    """A DeploymentConfig from keyword settings; unknown names are a ConfigError."""
    return DeploymentConfig(**_known(DeploymentConfig, kwargs, "deployment"))
