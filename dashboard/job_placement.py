"""Where a job's entrypoint runs, chosen as Ray's job manager does: on the head node when the
job asks for no resources and no labels (its driver is then beside the dashboard and the
GCS, as Ray users expect), else on any node that has what it asks for and whose labels match
``entrypoint_label_selector``. ``EMBER_JOB_ALLOW_DRIVER_ON_WORKER_NODES=1`` lets a job that
asks for nothing run anywhere.

The choice is a node id the supervisor actor is pinned to (hard node affinity); a selector no
live node matches fails the job at once, naming the selector and the labels nodes have, rather
than leaving it pending with nothing to wait for (Ember has no autoscaler to add the node).
"""

from __future__ import annotations

import os
from typing import Any

from ember.labels import NODE_ID_LABEL, matches, node_labels
from ember.resources import fits

ALLOW_WORKER_NODES = "EMBER_JOB_ALLOW_DRIVER_ON_WORKER_NODES"
RESOURCE_KEYS = (
    "entrypoint_num_cpus",
    "entrypoint_num_gpus",
    "entrypoint_memory",
    "entrypoint_resources",
    "entrypoint_label_selector",
)


class NoMatchingNode(Exception):
    """No live node has the labels the job selects."""


def resources_specified(rec: dict[str, Any]) -> bool:
    """Whether the job asked for anything (Ray's rule: a zero or empty request is none)."""
    return any(rec.get(k) for k in RESOURCE_KEYS)


def shape(rec: dict[str, Any]) -> dict[str, float]:
    """What the entrypoint reserves, as resource amounts."""
    out = {"CPU": float(rec.get("entrypoint_num_cpus") or 0)}
    if rec.get("entrypoint_num_gpus"):
        out["GPU"] = float(rec["entrypoint_num_gpus"])
    if rec.get("entrypoint_memory"):
        out["memory"] = float(rec["entrypoint_memory"])
    out.update(rec.get("entrypoint_resources") or {})
    return {k: v for k, v in out.items() if v}


def selector_for(rec: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, str]:
    """The labels the entrypoint's node must have."""
    selector = dict(rec.get("entrypoint_label_selector") or {})
    if resources_specified(rec) or os.environ.get(ALLOW_WORKER_NODES) == "1":
        return selector
    head = next((n for n in nodes if n.get("is_head") and n.get("state") == "ALIVE"), None)
    return {NODE_ID_LABEL: head["node_id"]} if head else {}


def choose_node(rec: dict[str, Any], nodes: list[dict[str, Any]]) -> str | None:
    """The node id to pin the entrypoint to, or None: any node its resources fit. Among the
    nodes the selector matches, one where the entrypoint fits now, else one where it can ever
    fit (it waits there), else the first (its supervisor then reports what does not fit)."""
    selector = selector_for(rec, nodes)
    if not selector:
        return None
    alive = [n for n in nodes if n.get("state") == "ALIVE"]
    chosen = [n for n in alive if matches(selector, node_labels(n["node_id"], n.get("labels")))]
    if not chosen:
        have = (
            "; ".join(f"{n['node_id'][:12]}: {n.get('labels') or {}}" for n in alive)
            or "no live node"
        )
        raise NoMatchingNode(
            f"no live node matches the entrypoint's label selector {selector} (nodes' labels: "
            f"{have}); start a node with matching `ember start --labels`, or change the selector"
        )
    need = shape(rec)
    for key in ("resources_available", "resources_total"):
        for n in chosen:
            if fits(need, n.get(key) or {}):
                return n["node_id"]
    return chosen[0]["node_id"]
