"""The GCS key-value store, namespace "serve", through the runtime's public worker calls (as
``ember.autoscaler.sdk`` reaches it): the controller's desired state lives here, so a
restarted controller, or one on a restarted head with durable storage, reconciles from it."""

from __future__ import annotations

from ember import global_state
from ember.serve.names import NAMESPACE

TIMEOUT_S = 10.0


def _call(op: str, body: dict) -> object:
    return global_state.require_worker().call_gcs_sync(
        op, {"namespace": NAMESPACE, **body}, timeout=TIMEOUT_S
    )


def put(key: bytes, value: bytes) -> None:
    _call("kv_put", {"key": key, "value": value, "overwrite": True})


def get(key: bytes) -> bytes | None:
    return _call("kv_get", {"key": key})  # type: ignore[return-value]


def delete(key: bytes) -> None:
    _call("kv_del", {"key": key})


def keys(prefix: bytes) -> list[bytes]:
    return list(_call("kv_keys", {"prefix": prefix}) or [])  # type: ignore[call-overload]
