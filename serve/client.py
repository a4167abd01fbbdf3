"""One per process: the controller's handle and the routing snapshot it publishes.

The controller publishes its routing state (routes, each deployment's replicas) with an epoch
number; a thread here long-polls it (``listen(epoch)`` answers when the epoch moves, or after
its timeout), so handles and the proxy see a new or dead replica within a round trip, and a
restarted controller is found again by name.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import ember
from ember.serve.exceptions import RayServeException
from ember.serve.names import CONTROLLER_NAME, NAMESPACE

LISTEN_TIMEOUT_S = 10.0  # the controller answers a listen within this even if nothing moved
RETRY_S = 0.5  # the wait before asking a missing or restarting controller again


def get_controller(timeout_s: float = 0.0) -> Any:
    """The controller's handle; RayServeException if Serve is not running."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ember.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
        except ValueError:
            if time.monotonic() >= deadline:
                raise RayServeException(
                    "Serve is not running on this cluster: call serve.start() or serve.run() "
                    "first (no controller actor "
                    f"{CONTROLLER_NAME!r} in namespace {NAMESPACE!r})"
                ) from None
            time.sleep(0.1)


class RoutingClient:
    def __init__(self) -> None:
        self.epoch = -1
        self.snapshot: dict = {"routes": {}, "replicas": {}, "queues": {}}
        self.changed = threading.Condition()
        self.thread: threading.Thread | None = None
        self.stopped = False

    def start(self) -> None:
        with self.changed:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._listen, name="ember-serve-listen", daemon=True
                )
                self.thread.start()

    def _listen(self) -> None:
        controller = None
        while not self.stopped:
            try:
                if controller is None:
                    controller = get_controller()
                ref = controller.listen.remote(self.epoch, LISTEN_TIMEOUT_S)
                epoch, snapshot = ember.get(ref, timeout=LISTEN_TIMEOUT_S + 20)
            except Exception:  # controller gone or restarting: find it again shortly
                controller = None
                if not ember.is_initialized():
                    return
                time.sleep(RETRY_S)
                continue
            if epoch != self.epoch:
                with self.changed:
                    self.epoch, self.snapshot = epoch, snapshot
                    self.changed.notify_all()

    def report_dead(self, key: str, replica_tag: str) -> None:
        """Tells the controller at once (from a thread: this runs in a future's callback)."""
        app, _, deployment = key.partition("#")

        def send() -> None:
            try:
                get_controller().replica_died.remote(
                    app, deployment, replica_tag, "died (seen by a router)"
                )
            except Exception:
                pass  # the controller's own health check finds it

        threading.Thread(target=send, name="ember-serve-report", daemon=True).start()

    def wait_first(self, timeout_s: float) -> None:
        """Blocks until the first snapshot arrived (or the timeout)."""
        self.start()
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while self.epoch < 0 and time.monotonic() < deadline:
                self.changed.wait(0.05)

    def wait_epoch(self, after: int, timeout_s: float) -> bool:
        """Blocks until the snapshot is newer than ``after``; False at the timeout."""
        self.start()
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while self.epoch <= after:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.changed.wait(min(remaining, 0.1))
        return True


_client: RoutingClient | None = None
_lock = threading.Lock()


def routing_client() -> RoutingClient:
    global _client
    with _lock:
        if _client is None:
            _client = RoutingClient()
        _client.start()
        return _client


def reset_routing_client() -> None:
    """Forgets the snapshot (after serve.shutdown(), or a new cluster)."""
    global _client
    with _lock:
        if _client is not None:
            _client.stopped = True
        _client = None
