"""Choosing a replica for each request: power of two choices on queue length.

Each process routes with what it knows: the replica set from the controller's snapshot
(``client.RoutingClient``) and the requests *it* has in flight on each replica. Of two replicas
drawn at random the one with fewer in flight gets the request; a replica at its
``max_ongoing_requests`` is never chosen. When every replica is full the request waits (at
most ``max_queued_requests`` waiting per deployment, each at most its timeout) and then fails
with ``BackPressureError``: never an unbounded queue. A finished request wakes a waiter at
once (threads through a condition, event-loop callers through a future), so a queue drains
at the replicas' pace rather than a poller's.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import deque
from typing import Any

from ember.serve.client import routing_client
from ember.serve.exceptions import BackPressureError, DeploymentUnavailableError

DEFAULT_QUEUE_TIMEOUT_S = 30.0
NO_REPLICA_TIMEOUT_S = 30.0  # how long a request waits for a deployment's first replica


class Router:
    def __init__(self, app: str, deployment: str) -> None:
        self.key = f"{app}#{deployment}"
        self.name = f"{deployment!r} of application {app!r}"
        self.client = routing_client()
        self.lock = threading.Lock()
        self.in_flight: dict[str, int] = {}
        self.dead: set[str] = set()  # replicas seen dying, until the snapshot drops them
        self.waiting = 0
        self.freed = threading.Condition(self.lock)
        # callers waiting on an event loop (the proxy, a replica, an async driver), oldest
        # first: a finished request wakes one (``release`` runs on the runtime's thread)
        self.async_waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = deque()

    def _replicas(self) -> list[tuple[str, Any, int]]:
        listed = self.client.snapshot["replicas"].get(self.key, ())
        if self.dead:  # forget the dead ones the controller no longer lists
            self.dead &= {r[0] for r in listed}
        return [r for r in listed if r[0] not in self.dead]

    def _choose(self) -> tuple[str, Any] | None:
        """A replica with room (two random choices, the less loaded), or None. Holds the lock."""
        open_ = [r for r in self._replicas() if self.in_flight.get(r[0], 0) < r[2]]
        if not open_:
            return None
        pick = (
            open_[0]
            if len(open_) == 1
            else min(random.sample(open_, 2), key=lambda r: self.in_flight.get(r[0], 0))
        )
        self.in_flight[pick[0]] = self.in_flight.get(pick[0], 0) + 1
        return pick[0], pick[1]

    def try_assign(self) -> tuple[str, Any] | None:
        with self.lock:
            return self._choose()

    def _queue_limit(self) -> int:
        limit = self.client.snapshot["queues"].get(self.key, 1000)
        return limit if limit > 0 else 1 << 30

    def _no_room(self, started: float) -> Exception:
        if not self._replicas():
            return DeploymentUnavailableError(
                f"deployment {self.name} has no running replica (waited "
                f"{time.monotonic() - started:.1f}s); see serve.status()"
            )
        return BackPressureError(
            self.name, self.waiting, self._queue_limit(), time.monotonic() - started
        )

    def assign(self, timeout_s: float | None) -> tuple[str, Any]:
        """A replica for one request, waiting (bounded) for room; raises when there is none."""
        started = time.monotonic()
        self.client.wait_first(NO_REPLICA_TIMEOUT_S)
        timeout_s = DEFAULT_QUEUE_TIMEOUT_S if timeout_s is None else timeout_s
        with self.lock:
            pick = self._choose()
            if pick is not None:
                return pick
            if self.waiting >= self._queue_limit():
                raise self._no_room(started)
            self.waiting += 1
            try:
                while True:
                    remaining = started + timeout_s - time.monotonic()
                    if remaining <= 0:
                        raise self._no_room(started)
                    # woken by a finished request; the snapshot moving is polled
                    self.freed.wait(min(remaining, 0.05))
                    pick = self._choose()
                    if pick is not None:
                        return pick
            finally:
                self.waiting -= 1

    async def assign_async(self, timeout_s: float | None) -> tuple[str, Any]:
        """As ``assign``, for a caller on an event loop (the proxy, a replica): never blocks it."""
        started = time.monotonic()
        timeout_s = DEFAULT_QUEUE_TIMEOUT_S if timeout_s is None else timeout_s
        pick = self.try_assign()
        if pick is not None:
            return pick
        with self.lock:
            if self.waiting >= self._queue_limit() and self.client.epoch >= 0:
                raise self._no_room(started)
            self.waiting += 1
        loop = asyncio.get_running_loop()
        try:
            while True:
                remaining = started + timeout_s - time.monotonic()
                if remaining <= 0:
                    raise self._no_room(started)
                woken = loop.create_future()
                with self.lock:
                    pick = self._choose()
                    if pick is not None:
                        return pick
                    self.async_waiters.append((loop, woken))
                try:
                    # woken by a finished request; the snapshot moving (a new replica) is
                    # polled. Polling alone (sleeps of up to 20 ms) capped a deployment at
                    # max_ongoing_requests per ~10 ms once callers queued.
                    await asyncio.wait_for(woken, min(remaining, 0.05))
                except TimeoutError:
                    pass
                finally:
                    with self.lock:
                        try:
                            self.async_waiters.remove((loop, woken))
                        except ValueError:
                            pass  # release() took it
        finally:
            with self.lock:
                self.waiting -= 1

    def release(self, replica_id: str, died: bool = False) -> None:
        with self.lock:
            left = self.in_flight.get(replica_id, 1) - 1
            if left > 0:
                self.in_flight[replica_id] = left
            else:
                self.in_flight.pop(replica_id, None)
            if died and replica_id not in self.dead:  # route around it now
                self.dead.add(replica_id)
                self.client.report_dead(self.key, replica_id)
            self.freed.notify()
            while self.async_waiters:
                loop, woken = self.async_waiters.popleft()
                if woken.done():
                    continue  # it timed out and polls by itself
                try:
                    loop.call_soon_threadsafe(_wake, woken)
                    break
                except RuntimeError:  # its loop is closed: the next waiter
                    continue


def _wake(woken: asyncio.Future) -> None:
    if not woken.done():
        woken.set_result(None)


_routers: dict[str, Router] = {}
_routers_lock = threading.Lock()


def router_for(app: str, deployment: str) -> Router:
    key = f"{app}#{deployment}"
    with _routers_lock:
        router = _routers.get(key)
        if router is None or router.client is not routing_client():
            router = _routers[key] = Router(app, deployment)
        return router


def forget_routers() -> None:
    with _routers_lock:
        _routers.clear()
