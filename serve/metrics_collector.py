"""The controller's collection of request metrics: about once a second it asks the proxy and
every live replica for their counters (``request_metrics``), without waiting on any of
them in its loop, and returns the record ``serve/request_metrics.py`` describes, for the KV
key ``request_metrics``.

A replica that is gone (replaced after a crash, stopped by a rolling update or a downscale)
takes its counters with it; the last ones collected from it are folded into its deployment's
``retired`` totals, so a deployment's counts only grow while it exists (what it handled
after that last collection, up to a second's worth, is lost with the process). A restarted
controller starts from the record its predecessor wrote last.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from typing import Any

from ember.serve.request_metrics import BUCKETS_MS

COLLECT_EVERY_S = 1.0


def _fold(acc: dict[str, Any], series: dict[str, Any]) -> None:
    acc["count"] += series.get("count", 0)
    acc["errors"] += series.get("errors", 0)
    acc["sum_ms"] += series.get("sum_ms", 0.0)
    for i, c in enumerate(series.get("buckets") or []):
        if i < len(acc["buckets"]):
            acc["buckets"][i] += c


def _merged(proxies: Any) -> dict[str, dict[str, Any]]:
    """Every proxy's series summed by key (route, method, status): one set of counts for the
    HTTP families, whichever node's proxy a request came in by."""
    out: dict[str, dict[str, Any]] = {}
    for routes in proxies:
        for key, series in routes.items():
            acc = out.get(key)
            if acc is None:
                out[key] = {**series, "buckets": list(series.get("buckets") or [])}
            else:
                _fold(acc, series)
    return out


class MetricsCollector:
    def __init__(self, previous: bytes | None = None) -> None:
        self.asked_at = 0.0
        # who -> the pending answer; who is "proxy:<node id>" or a replica's tag
        self.pending: dict[str, tuple[concurrent.futures.Future, dict]] = {}
        self.proxies: dict[str, dict[str, Any]] = {}  # node id -> its proxy's series
        self.replicas: dict[str, dict[str, Any]] = {}
        # {app: {deployment: summed counters of its replicas that are gone}}
        self.retired: dict[str, dict[str, dict[str, Any]]] = {}
        if previous:  # a restarted controller: its predecessor's last record
            try:
                record = json.loads(previous)
                if record.get("buckets_ms") == list(BUCKETS_MS):
                    self.replicas = dict(record.get("replicas") or {})
                    self.retired = dict(record.get("retired") or {})
            except (ValueError, AttributeError):
                pass  # unreadable: counting starts again

    def _retire(self, tag: str) -> None:
        # an answer still on its way would add the replica back and count it twice
        self.pending.pop(tag, None)
        r = self.replicas.pop(tag)
        by_app = self.retired.setdefault(r.get("app", ""), {})
        acc = by_app.setdefault(
            r.get("deployment", ""),
            {"count": 0, "errors": 0, "sum_ms": 0.0, "buckets": [0] * (len(BUCKETS_MS) + 1)},
        )
        for series in (r.get("routes") or {}).values():
            _fold(acc, series)

    def tick(
        self, now: float, proxies: dict[str, Any], node_id: str, apps: dict[str, Any]
    ) -> dict | None:
        """The new record when one is due and its answers came, else None. ``proxies``:
        {node id: proxy actor}; their series are summed into the record's one ``proxy``."""
        for who, (fut, about) in list(self.pending.items()):
            if not fut.done():
                continue
            del self.pending[who]
            if fut.cancelled() or fut.exception() is not None:
                continue  # a dying replica: its counts since the last answer go with it
            if who.startswith("proxy:"):
                if who[len("proxy:") :] in proxies:
                    self.proxies[who[len("proxy:") :]] = fut.result()
            else:
                self.replicas[who] = {**about, **fut.result()}
        if now - self.asked_at < COLLECT_EVERY_S:
            return None
        self.asked_at = now
        live = set()
        for gone in set(self.proxies) - set(proxies):  # its node is gone
            del self.proxies[gone]
        for proxy_node, proxy in proxies.items():
            if "proxy:" + proxy_node not in self.pending:
                future = proxy.request_metrics.remote().future()
                self.pending["proxy:" + proxy_node] = (future, {})
        for app in apps.values():
            for dname, ds in app.deployments.items():
                for r in ds.replicas:
                    live.add(r.tag)
                    # a STOPPING replica still drains requests: its counts are collected
                    # until it is gone
                    if r.state not in ("RUNNING", "STOPPING") or r.tag in self.pending:
                        continue
                    about = {"app": app.name, "deployment": dname, "actor_name": r.name, **r.info}
                    self.pending[r.tag] = (r.handle.request_metrics.remote().future(), about)
        for gone in set(self.replicas) - live:
            self._retire(gone)
        deployments = {(a.name, d) for a in apps.values() for d in a.deployments}
        for app in list(self.retired):  # deleted deployments' totals go with them
            kept = {d: v for d, v in self.retired[app].items() if (app, d) in deployments}
            if kept:
                self.retired[app] = kept
            else:
                del self.retired[app]
        return {
            "time": time.time(),
            "buckets_ms": list(BUCKETS_MS),
            "proxy": {"node_id": node_id, "routes": _merged(self.proxies.values())},
            "replicas": self.replicas,
            "retired": self.retired,
        }
