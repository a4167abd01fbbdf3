"""The autoscaler's status record: one JSON document the monitor writes to the GCS's KV each
tick (namespace ``autoscaler``, key ``status``), read by ``ember status``, the dashboard's
Config view and its Prometheus families. Those readers never import ``ember.autoscaler``: this
record is the interface between them, so fields are added, never renamed, and ``version``
bumps on a breaking change.

``build_status`` is a pure function of the loop's state; ``STATUS_KEY`` is where it goes.
The fields (version 1)::

    version, time, cluster_name, monitor_pid,
    config          the cluster config, secrets ("ssh_private_key", passwords, tokens) -> "***"
    node_types      {name: {min_workers, max_workers, resources, running, pending}}
    instances       [{instance_id, node_type, state, node_id, ip, since, idle_since, error,
                      note}]   (terminated/failed ones kept for ENDED_KEPT_S only)
    demand          {leases: [{shape, count}], actors: [{shape, count}],
                     placement_groups: [{id, strategy, bundles}], request_resources: [..]}
    infeasible      [{shape, count, since}]
    usage           {resource: [used, total]}   (alive nodes, draining ones included)
    decisions       [{time, action, node_type, instance_id, count, reason}]   (last 200)
    counters        {started, stopped, failed_create, failed_join}
    backoff         {node type: {failures, until}}
    idle_timeout_s, upscaling_speed
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ember.autoscaler.demand import waiting
from ember.autoscaler.instance import ENDED_STATES, NODE_STATES, PENDING_STATES, Instance
from ember.masking import mask_secrets

STATUS_NAMESPACE = "autoscaler"
STATUS_KEY = b"status"
VERSION = 1
MAX_DECISIONS = 200
ENDED_KEPT_S = 600.0  # terminated and failed instances stay in the record this long


def _counted(shapes: Iterable[Mapping[str, float]]) -> list[dict[str, Any]]:
    counts = Counter(tuple(sorted(s.items())) for s in shapes if s)
    return [{"shape": dict(k), "count": n} for k, n in sorted(counts.items())]


def demand_section(
    info: Mapping[str, Any], requested: Sequence[Mapping[str, float]]
) -> dict[str, Any]:
    """What waits, by kind (``demand.waiting``), shapes counted."""
    w = waiting(info)
    return {
        "leases": _counted(w.leases),
        "actors": _counted(w.actors),
        "placement_groups": [
            {"id": gid, "strategy": strategy, "bundles": bundles}
            for gid, strategy, bundles in w.groups
        ],
        "request_resources": [dict(r) for r in requested],
    }


def usage_section(info: Mapping[str, Any]) -> dict[str, list[float]]:
    used: dict[str, float] = {}
    total: dict[str, float] = {}
    for node in info.get("nodes") or ():
        if node.get("state") != "ALIVE":
            continue
        free = node.get("resources_available") or {}
        for k, v in (node.get("resources_total") or {}).items():
            total[k] = total.get(k, 0.0) + float(v)
            used[k] = used.get(k, 0.0) + float(v) - float(free.get(k, 0.0))
    return {k: [round(used[k], 6), total[k]] for k in sorted(total)}


def instance_row(inst: Instance, idle_since: float | None) -> dict[str, Any]:
    return {
        "instance_id": inst.instance_id,
        "node_type": inst.node_type,
        "state": inst.state.value,
        "node_id": inst.node_id,
        "ip": inst.ip,
        "since": inst.since,
        "idle_since": idle_since,
        "error": inst.failure,
        "note": inst.note,
    }


def build_status(
    *,
    config: Mapping[str, Any],
    instances: Iterable[Instance],
    info: Mapping[str, Any],
    requested: Sequence[Mapping[str, float]],
    infeasible: Sequence[Mapping[str, Any]],
    decisions: Sequence[Mapping[str, Any]],
    counters: Mapping[str, int],
    backoff: Mapping[str, Mapping[str, float]],
    idle_since: Mapping[str, float],
    now: float,
    monitor_pid: int | None = None,
) -> dict[str, Any]:
    """The record for this tick. ``idle_since`` is {Ember node id: since} of idle nodes."""
    instances = list(instances)
    running: Counter[str] = Counter()
    pending: Counter[str] = Counter()
    for inst in instances:
        if inst.state in NODE_STATES:
            running[inst.node_type] += 1
        elif inst.state in PENDING_STATES:
            pending[inst.node_type] += 1
    head_type = config["head_node_type"]
    running[head_type] += sum(
        1 for n in info.get("nodes") or () if n.get("is_head") and n.get("state") == "ALIVE"
    )
    node_types = {
        name: {
            "min_workers": int(t.get("min_workers", 0)),
            "max_workers": int(t.get("max_workers", 0)),
            "resources": dict(t.get("resources") or {}),
            "running": running[name],
            "pending": pending[name],
        }
        for name, t in sorted(config["available_node_types"].items())
    }
    rows = [
        instance_row(inst, idle_since.get(inst.node_id or ""))
        for inst in instances
        if inst.state not in ENDED_STATES or now - inst.since <= ENDED_KEPT_S
    ]
    return {
        "version": VERSION,
        "time": now,
        "cluster_name": config["cluster_name"],
        "monitor_pid": os.getpid() if monitor_pid is None else monitor_pid,
        "config": mask_secrets(config),
        "node_types": node_types,
        "instances": rows,
        "demand": demand_section(info, requested),
        "infeasible": [dict(i) for i in infeasible],
        "usage": usage_section(info),
        "decisions": [dict(d) for d in decisions][-MAX_DECISIONS:],
        "counters": dict(counters),
        "backoff": {k: dict(v) for k, v in backoff.items()},
        "idle_timeout_s": float(config["idle_timeout_minutes"]) * 60.0,
        "upscaling_speed": float(config.get("upscaling_speed", 1.0)),
    }


def encode(record: Mapping[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True).encode()
