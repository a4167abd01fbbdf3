"""The publisher's writes to the GCS KV, off the controller's thread: each GCS call waits a
round trip and the GCS's write to its storage (a few ms), which the trial loop must not wait
for. Pending writes are kept one per key (a newer value replaces the older and moves to the
end, so the experiment's record, written last, never names a version whose rows are not yet
written), which bounds the memory to one value per key whatever the GCS's speed. The thread
also reads one key (the user's stop requests) every ``poll_s``, for the loop to look at."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class KvOutbox:
    def __init__(
        self, call: Callable[..., Any], namespace: str, watch: bytes, poll_s: float
    ) -> None:
        self.call = call  # the driver's call_gcs_sync
        self.namespace = namespace
        self.watch = watch
        self.poll_s = poll_s
        self.watched: bytes | None = None  # the watched key's last value read
        self._pending: dict[bytes, tuple[str, bytes | None]] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="tune-publish", daemon=True)

    def start(self) -> None:
        """Clears the watched key first (a stop asked of an earlier run of the experiment
        must not stop this one), then starts writing and watching."""
        self._call("kv_del", self.watch, None)
        self._thread.start()

    def put(self, key: bytes, value: bytes) -> None:
        self._queue(key, "kv_put", value)

    def _queue(self, key: bytes, op: str, value: bytes | None) -> None:
        with self._cond:
            self._pending.pop(key, None)
            self._pending[key] = (op, value)
            self._cond.notify()

    def close(self, timeout: float = 30.0) -> None:
        """Writes what is pending (within ``timeout``: the experiment's final record is in
        it, and a GCS under load answers slowly), then ends the thread."""
        if not self._thread.is_alive():
            return
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        polled = 0.0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closed, timeout=self.poll_s)
                batch, self._pending = self._pending, {}
                closing = self._closed
            for key, (op, value) in batch.items():
                self._call(op, key, value)
            if closing:
                with self._cond:
                    if not self._pending:
                        return
                continue
            if time.monotonic() - polled >= self.poll_s:
                polled = time.monotonic()
                self.watched = self._call("kv_get", self.watch, None)

    def _call(self, op: str, key: bytes, value: bytes | None) -> Any:
        body: dict[str, Any] = {"namespace": self.namespace, "key": key}
        if op == "kv_put":
            body.update(value=value, overwrite=True)
        try:
            return self.call(op, body, timeout=5.0)
        except Exception as e:  # noqa: BLE001 - the view lags; the experiment goes on
            if not self._failed:
                logger.warning("ember.tune: could not publish to the dashboard: %s", e)
                self._failed = True
            return None
