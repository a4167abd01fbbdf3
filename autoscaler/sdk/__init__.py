"""``ember.autoscaler.sdk.request_resources``: ask the autoscaler for a cluster size (Ray's
``ray.autoscaler.sdk.request_resources``). The request is a floor on the cluster's *total*
capacity, whatever runs on it; each call replaces the previous one, and
``request_resources(num_cpus=0)`` withdraws it. It is kept in the GCS's key-value store, so it
outlives the driver and a restarted autoscaler reads it back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from numbers import Real

from ember import global_state

KV_NAMESPACE = "autoscaler"
KV_KEY = b"request_resources"
MAX_BUNDLES = 10_000  # a bound on what one request can make the scheduler pack


def to_bundles(
    num_cpus: int | None = None, bundles: Sequence[Mapping[str, float]] | None = None
) -> list[dict[str, float]]:
    """The request as bundles; ValueError naming what is wrong."""
    if num_cpus is not None and (
        isinstance(num_cpus, bool) or not isinstance(num_cpus, int) or num_cpus < 0
    ):
        raise ValueError(f"num_cpus must be a whole number >= 0, got {num_cpus!r}")
    out = [{"CPU": 1.0}] * (num_cpus or 0)
    for i, b in enumerate(bundles or ()):
        if not isinstance(b, Mapping):
            raise ValueError(f"bundles[{i}] must be a dict of resource amounts, got {b!r}")
        for name, amount in b.items():
            ok = isinstance(amount, Real) and not isinstance(amount, bool) and amount >= 0
            if not isinstance(name, str) or not ok:
                raise ValueError(
                    f"bundles[{i}]: {name!r}: {amount!r} is not a resource amount >= 0"
                )
        out.append({k: float(v) for k, v in b.items() if v})
    if len(out) > MAX_BUNDLES:
        raise ValueError(f"at most {MAX_BUNDLES} bundles per request, got {len(out)}")
    return out


def request_resources(
    num_cpus: int | None = None, bundles: Sequence[Mapping[str, float]] | None = None
) -> None:
    """Makes the autoscaler keep room for ``num_cpus`` one-CPU bundles plus ``bundles``."""
    wanted = to_bundles(num_cpus, bundles)
    worker = global_state.require_worker()
    body = {
        "namespace": KV_NAMESPACE,
        "key": KV_KEY,
        "value": json.dumps(wanted).encode(),
        "overwrite": True,
    }
    worker.call_gcs_sync("kv_put", body, timeout=10.0)


def read_request(value: bytes | None) -> list[dict[str, float]]:
    """The stored request (the KV value), [] for none or an unreadable one."""
    if not value:
        return []
    try:
        return to_bundles(bundles=json.loads(value))
    except (ValueError, TypeError):
        return []
