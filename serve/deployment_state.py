"""One deployment's replicas, reconciled towards its desired state on each controller tick.

Desired: a version (a hash of the code, its constructor arguments and actor options) and a
replica count (fixed, or the autoscaling policy's). Each tick, idempotently:
- a starting replica that became ready is routable; one whose constructor failed is dropped,
  and the next start waits a growing backoff;
- a routable replica is health-checked every ``health_check_period_s``; one that died, failed
  its check or timed out is killed and replaced;
- a **rolling update** starts one new-version replica at a time and stops an old one only once
  a new one is ready, so the routable count never drops below the target;
- a stopped replica first leaves the routing table, then drains, then is killed.
Every such step goes to the controller's bounded decision log, with its reason.
"""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import ember
from ember.serve.autoscaling import PolicyState, decide
from ember.serve.config import DeploymentConfig
from ember.serve.names import NAMESPACE, REPLICA_NAME_PREFIX
from ember.serve.replica import Replica

STARTING, RUNNING, STOPPING = "STARTING", "RUNNING", "STOPPING"
FAILURES_BEFORE_UNHEALTHY = 3
METRICS_PERIOD_S = 0.5


@dataclass
class DeploymentSpec:
    """What the user declared for one deployment (the controller's desired state)."""

    name: str
    target: Any  # the user's function or class
    init_args: tuple
    init_kwargs: dict
    config: DeploymentConfig
    version: str
    is_asgi: bool = False


@dataclass
class ReplicaInfo:
    tag: str
    name: str  # the actor's name (namespace "serve")
    handle: Any
    version: str
    state: str = STARTING
    ready: concurrent.futures.Future | None = None
    started_at: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    health: concurrent.futures.Future | None = None
    health_sent: float = 0.0
    last_health: float = field(default_factory=time.monotonic)
    stop: concurrent.futures.Future | None = None
    stop_deadline: float = 0.0
    metrics: concurrent.futures.Future | None = None
    ongoing: int = 0
    info: dict = field(default_factory=dict)  # node_id, actor_id, pid once ready


def _failed(fut: concurrent.futures.Future) -> BaseException | None:
    """The done future's error, None if it succeeded."""
    return RuntimeError("cancelled") if fut.cancelled() else fut.exception()


_REPLICA_CLASS: Any = None


def _replica_class() -> Any:
    global _REPLICA_CLASS
    if _REPLICA_CLASS is None:  # made once: each start reuses the exported class
        _REPLICA_CLASS = ember.remote(Replica)
    return _REPLICA_CLASS


class DeploymentState:
    def __init__(self, app: str, spec: DeploymentSpec, log: Any) -> None:
        self.app = app
        self.spec = spec
        self.log = log  # log(app, deployment, kind, message)
        self.target = spec.config.initial_target()
        self.replicas: list[ReplicaInfo] = []
        self.failures = 0
        self.retry_at = 0.0
        self.message = ""
        self.policy = PolicyState()
        self.metrics_at = 0.0
        self.deleting = False
        self.settled = False  # reached its target at its current version once

    # -- desired state -------------------------------------------------------------------
    def update(self, spec: DeploymentSpec) -> None:
        old = self.spec
        self.spec = spec
        self.deleting = False
        self.failures, self.retry_at, self.message = 0, 0.0, ""
        if spec.config.autoscaling_config is None or old.config.autoscaling_config is None:
            self.target = spec.config.initial_target()
        else:  # keep the autoscaled count, within the new bounds
            a = spec.config.autoscaling_config
            self.target = max(a.min_replicas, min(a.max_replicas, self.target))
        if spec.version != old.version:
            self.settled = False
            self.log(
                self.app, spec.name, "updated", f"new version {spec.version[:8]}: rolling update"
            )
            return
        c, o = spec.config, old.config
        if (c.user_config, c.max_ongoing_requests) != (o.user_config, o.max_ongoing_requests):
            for r in self._live():  # in place, no restart
                r.handle.reconfigure.remote(c.user_config, c.max_ongoing_requests)
            self.log(
                self.app, spec.name, "updated", "user_config/max_ongoing_requests applied in place"
            )

    def delete(self) -> None:
        self.deleting = True
        self.target = 0

    def adopt(self, name: str, tag: str, version: str, stopping: bool) -> None:
        """A replica a previous controller started (found by name after a restart); one it was
        stopping is stopped again, never routed to."""
        try:
            handle = ember.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            return
        r = ReplicaInfo(tag, name, handle, version)
        self.replicas.append(r)
        if stopping:
            self._stop(r, "was being stopped when the controller restarted")
        else:
            r.ready = handle.wait_ready.remote().future()

    # -- reading -------------------------------------------------------------------------
    def _live(self) -> list[ReplicaInfo]:
        return [r for r in self.replicas if r.state != STOPPING]

    def routable(self) -> list[tuple[str, Any, int]]:
        m = self.spec.config.max_ongoing_requests
        return [(r.tag, r.handle, m) for r in self.replicas if r.state == RUNNING]

    def status(self) -> str:
        live = self._live()
        new_running = [r for r in live if r.state == RUNNING and r.version == self.spec.version]
        if self.failures >= FAILURES_BEFORE_UNHEALTHY:
            return "UNHEALTHY"
        if len(new_running) == len(live) == self.target:
            self.settled = True
            return "HEALTHY"
        # once a version has settled, autoscaling moves are UPSCALING/DOWNSCALING, not a deploy
        if self.settled and self.spec.config.autoscaling_config is not None:
            return "UPSCALING" if len(live) < self.target else "DOWNSCALING"
        return "UPDATING"

    def finished(self) -> bool:
        return self.deleting and not self.replicas

    # -- one tick ------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        for r in list(self.replicas):
            if r.state == STARTING:
                self._check_started(r)
            elif r.state == RUNNING:
                self._check_health(r, now)
            elif r.state == STOPPING and (
                (r.stop is not None and r.stop.done()) or now > r.stop_deadline
            ):
                self._kill(r)
        if not self.deleting:
            self._autoscale(now)
        self._reconcile(now)

    def _check_started(self, r: ReplicaInfo) -> None:
        if r.ready is None or not r.ready.done():
            return
        error = _failed(r.ready)
        if error is None:
            r.state, r.info, r.last_health = RUNNING, r.ready.result() or {}, time.monotonic()
            self.failures = 0
            self.message = ""
            return
        self.failures += 1
        self.retry_at = time.monotonic() + min(2**self.failures * 0.25, 10.0)
        self.message = f"replica {r.tag} failed to start: {error}"
        self.log(self.app, self.spec.name, "failed", self.message)
        self._kill(r)

    def _check_health(self, r: ReplicaInfo, now: float) -> None:
        c = self.spec.config
        if r.health is None:
            if now - r.last_health >= c.health_check_period_s:
                r.health, r.health_sent = r.handle.check_health.remote().future(), now
            return
        if r.health.done():
            error = _failed(r.health)
            r.health, r.last_health = None, now
            if error is not None:
                self._replace(r, f"health check failed: {type(error).__name__}: {error}")
        elif now - r.health_sent > c.health_check_timeout_s:
            r.health = None
            self._replace(r, f"health check timed out after {c.health_check_timeout_s:g}s")

    def replica_died(self, tag: str, reason: str) -> None:
        for r in self.replicas:
            if r.tag == tag and r.state != STOPPING:
                self._replace(r, reason)

    def _replace(self, r: ReplicaInfo, reason: str) -> None:
        self.log(self.app, self.spec.name, "replaced", f"replica {r.tag}: {reason}")
        self._kill(r)  # the reconcile below starts its replacement

    def _autoscale(self, now: float) -> None:
        a = self.spec.config.autoscaling_config
        if a is None:
            return
        running = [r for r in self.replicas if r.state == RUNNING]
        for r in running:
            if r.metrics is not None and r.metrics.done():
                if _failed(r.metrics) is None:
                    r.ongoing = r.metrics.result()
                r.metrics = None
        if now - self.metrics_at < METRICS_PERIOD_S:
            return
        self.metrics_at = now
        for r in running:
            if r.metrics is None:
                r.metrics = r.handle.get_num_ongoing_requests.remote().future()
        current = len(self._live())
        if current != self.target:
            return  # still moving towards the last decision
        target, self.policy, reason = decide(
            a, current, sum(r.ongoing for r in running), now, self.policy
        )
        if target != self.target:
            self.log(
                self.app, self.spec.name, "scaled", f"{self.target} -> {target} replicas: {reason}"
            )
            self.target = target

    def _reconcile(self, now: float) -> None:
        live = self._live()
        version = self.spec.version
        new = [r for r in live if r.version == version]
        old = [r for r in live if r.version != version]
        for r in old:  # an old one that never became routable is not worth waiting for
            if r.state == STARTING:
                self._stop(r, "old version, not yet started")
        old = [r for r in old if r.state == RUNNING]
        can_start = now >= self.retry_at and self.failures < FAILURES_BEFORE_UNHEALTHY
        if old:
            # rolling: one new replica at a time; an old one goes once a new one is routable
            if len(new) < self.target and can_start and not any(r.state == STARTING for r in new):
                self._start()
            running_new = sum(r.state == RUNNING for r in new)
            while old and (running_new + len(old) > self.target or self.target == 0):
                self._stop(old.pop(0), f"rolling update to version {version[:8]}")
            return
        if len(new) < self.target and can_start:
            for _ in range(self.target - len(new)):
                self._start()
        elif len(new) > self.target:
            # the ones not yet routable first, then the newest
            extra = sorted(new, key=lambda r: (r.state != STARTING, -r.started_at))
            for r in extra[: len(new) - self.target]:
                self._stop(r, "deleted" if self.deleting else f"scaled down to {self.target}")

    # -- actions -------------------------------------------------------------------------
    def _start(self) -> None:
        spec, c = self.spec, self.spec.config
        tag = f"{spec.name}#{uuid.uuid4().hex[:6]}"
        name = f"{REPLICA_NAME_PREFIX}{self.app}#{tag}"
        options = {"num_cpus": 1, **c.ray_actor_options}
        actor = _replica_class().options(
            name=name,
            namespace=NAMESPACE,
            lifetime="detached",
            max_restarts=0,  # the controller replaces a dead replica, with a fresh one
            max_concurrency=max(100, c.max_ongoing_requests * 4),
            **options,
        )
        handle = actor.remote(
            self.app, spec.name, tag, spec.target, spec.init_args, spec.init_kwargs, c
        )
        r = ReplicaInfo(tag, name, handle, spec.version)
        r.ready = handle.initialize.remote().future()
        self.replicas.append(r)

    def _stop(self, r: ReplicaInfo, reason: str) -> None:
        c = self.spec.config
        r.state = STOPPING  # out of the routing table from now on
        r.stop = r.handle.prepare_for_shutdown.remote(
            c.graceful_shutdown_wait_loop_s, c.graceful_shutdown_timeout_s
        ).future()
        r.stop_deadline = time.monotonic() + c.graceful_shutdown_timeout_s + 5.0
        self.log(self.app, self.spec.name, "stopped", f"replica {r.tag}: {reason}")

    def _kill(self, r: ReplicaInfo) -> None:
        try:
            ember.kill(r.handle)
        except Exception:
            pass  # already gone
        if r in self.replicas:
            self.replicas.remove(r)
