"""The replica autoscaling policy: a pure function of ongoing-request metrics (no I/O), so
the controller calls it each tick and the tests check it as a table.

As Ray Serve's default policy: the desired count is the current count scaled by how far the
ongoing requests are from ``target_ongoing_requests`` per replica, bounded by min/max; a
change is made only after it has been wanted continuously for ``upscale_delay_s`` (up) or
``downscale_delay_s`` (down). From zero replicas, any request scales up at once (Ray's cold
start path).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ember.serve.config import AutoscalingConfig


@dataclass(frozen=True)
class PolicyState:
    """Since when (monotonic seconds) the policy has wanted to scale, and which way."""

    wanting: int = 0  # +1 up, -1 down, 0 neither
    since: float = 0.0


def desired_replicas(cfg: AutoscalingConfig, current: int, ongoing: float) -> int:
    """The replica count the metrics ask for right now, before delays."""
    if current == 0:
        raw = math.ceil(ongoing / cfg.target_ongoing_requests) if ongoing > 0 else 0
    else:
        ratio = ongoing / (cfg.target_ongoing_requests * current)
        factor = cfg.upscaling_factor if ratio > 1 else cfg.downscaling_factor
        if factor is not None:  # smoothing: move only part of the way
            ratio = 1 + (ratio - 1) * factor
        raw = math.ceil(current * ratio - 1e-9)
    return max(cfg.min_replicas, min(cfg.max_replicas, raw))


def decide(
    cfg: AutoscalingConfig, current: int, ongoing: float, now: float, state: PolicyState
) -> tuple[int, PolicyState, str]:
    """(target replica count, next state, the reason in words) for one tick."""
    want = desired_replicas(cfg, current, ongoing)
    if current == 0 and want > 0:
        return want, PolicyState(), f"{ongoing:g} ongoing requests and no replicas: cold start"
    if want == current:
        return current, PolicyState(), ""
    direction = 1 if want > current else -1
    if state.wanting != direction:
        state = PolicyState(direction, now)
    delay = cfg.upscale_delay_s if direction > 0 else cfg.downscale_delay_s
    if now - state.since < delay:
        return current, state, ""
    per = ongoing / max(current, 1)
    reason = (
        f"{ongoing:g} ongoing requests ({per:.2g} per replica, target "
        f"{cfg.target_ongoing_requests:g}) for {now - state.since:.0f}s"
    )
    return want, PolicyState(), reason
