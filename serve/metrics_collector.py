"""The controller's collection of request metrics: about once a second it asks the proxy and
every running replica for their counters (``request_metrics``), without waiting on any of
them in its loop, and returns the record ``serve/request_metrics.py`` describes, for the KV
key ``request_metrics``."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

from ember.serve.request_metrics import BUCKETS_MS

COLLECT_EVERY_S = 1.0


class MetricsCollector:
    def __init__(self) -> None:
        self.asked_at = 0.0
        # who -> the pending answer; who is "proxy" or a replica's tag
        self.pending: dict[str, tuple[concurrent.futures.Future, dict]] = {}
        self.proxy: dict[str, Any] = {}
        self.replicas: dict[str, dict[str, Any]] = {}

    def tick(self, now: float, proxy: Any, node_id: str, apps: dict[str, Any]) -> dict | None:
        """The new record when one is due and its answers came, else None."""
        for who, (fut, about) in list(self.pending.items()):
            if not fut.done():
                continue
            del self.pending[who]
            if fut.cancelled() or fut.exception() is not None:
                continue  # a dying replica: its counts go with it
            if who == "proxy":
                self.proxy = {"node_id": node_id, "routes": fut.result()}
            else:
                self.replicas[who] = {**about, **fut.result()}
        if now - self.asked_at < COLLECT_EVERY_S:
            return None
        self.asked_at = now
        live = set()
        if proxy is not None and "proxy" not in self.pending:
            self.pending["proxy"] = (proxy.request_metrics.remote().future(), {})
        for app in apps.values():
            for dname, ds in app.deployments.items():
                for r in ds.replicas:
                    live.add(r.tag)
                    if r.state != "RUNNING" or r.tag in self.pending:
                        continue
                    about = {"app": app.name, "deployment": dname, "actor_name": r.name, **r.info}
                    self.pending[r.tag] = (r.handle.request_metrics.remote().future(), about)
        for gone in set(self.replicas) - live:
            del self.replicas[gone]
        return {
            "time": time.time(),
            "buckets_ms": list(BUCKETS_MS),
            "proxy": self.proxy,
            "replicas": self.replicas,
        }
