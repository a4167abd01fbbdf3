"""An autoscaler status record as the monitor writes it (the contract in
``dashboard/autoscaler/record.py``), for the readers' tests: ``ember status``, the dashboard's
Config view, its ``autoscaler_*`` families and events. Tests that need the real monitor's
record use ``ember.cluster_utils.AutoscalingCluster`` instead."""

from __future__ import annotations

import json
from typing import Any

NODE_A = "a1" * 28  # 56 hex digits, as a node id
NODE_B = "b2" * 28


def record(now: float, **over: Any) -> dict[str, Any]:
    """A cluster of a 1-CPU head (counted in its type, not an instance: the autoscaler
    never launched it) and 2-CPU ``cpu_node``s: one running (idle for 20 s), one launching,
    one that failed to launch; the config with an SSH key the monitor left
    unmasked (the readers mask it again) and one it masked."""
    rec: dict[str, Any] = {
        "version": 1,
        "time": now,
        "cluster_name": "scalerview-test",
        "monitor_pid": 4242,
        "config": {
            "cluster_name": "scalerview-test",
            "provider": {"type": "fake_multinode", "api_token": "s3cr3t-token"},
            "auth": {"ssh_user": "ember", "ssh_private_key": "***"},
            "head_node_type": "head",
            "available_node_types": {
                "head": {"resources": {"CPU": 1}, "min_workers": 0, "max_workers": 0},
                "cpu_node": {"resources": {"CPU": 2}, "min_workers": 0, "max_workers": 3},
            },
        },
        "node_types": {
            "head": {
                "min_workers": 0,
                "max_workers": 0,
                "resources": {"CPU": 1.0},
                "running": 1,
                "pending": 0,
            },
            "cpu_node": {
                "min_workers": 0,
                "max_workers": 3,
                "resources": {"CPU": 2.0},
                "running": 1,
                "pending": 1,
            },
        },
        "instances": [
            {
                "instance_id": "fake-1",
                "node_type": "cpu_node",
                "state": "running",
                "node_id": NODE_B,
                "ip": "127.0.0.1",
                "since": now - 60,
                "idle_since": now - 20,
                "error": None,
            },
            {
                "instance_id": "fake-2",
                "node_type": "cpu_node",
                "state": "launching",
                "node_id": None,
                "ip": None,
                "since": now - 3,
                "idle_since": None,
                "error": None,
            },
            {
                "instance_id": "fake-0",
                "node_type": "cpu_node",
                "state": "failed",
                "node_id": None,
                "ip": None,
                "since": now - 90,
                "idle_since": None,
                "error": "the node did not join within 30 s",
            },
        ],
        "demand": {
            "leases": [{"shape": {"CPU": 2.0}, "count": 1}],
            "actors": [],
            "placement_groups": [
                {"id": "c3" * 18, "strategy": "PACK", "bundles": [{"CPU": 1.0}, {"CPU": 1.0}]}
            ],
            "request_resources": [{"CPU": 1.0}, {"CPU": 1.0}, {"GPU": 1.0}],
        },
        "infeasible": [{"shape": {"GPU": 1.0}, "count": 1, "since": now - 30}],
        "usage": {"CPU": [2.0, 3.0]},
        "decisions": [
            {
                "time": now - 90,
                "action": "launch",
                "node_type": "cpu_node",
                "instance_id": "fake-0",
                "count": 1,
                "reason": "1 task needs {CPU: 2}; no node has room",
            },
            {
                "time": now - 61,
                "action": "failed",
                "node_type": "cpu_node",
                "instance_id": "fake-0",
                "count": 1,
                "reason": "the node did not join within 30 s",
            },
            {
                "time": now - 60,
                "action": "launch",
                "node_type": "cpu_node",
                "instance_id": "fake-1",
                "count": 1,
                "reason": "1 task needs {CPU: 2}; no node has room",
            },
            {
                "time": now - 3,
                "action": "launch",
                "node_type": "cpu_node",
                "instance_id": "fake-2",
                "count": 1,
                "reason": "request_resources asks for 4 CPUs in all",
            },
        ],
        "counters": {"started": 2, "stopped": 0, "failed_create": 1},
        "idle_timeout_s": 60.0,
        "upscaling_speed": 1.0,
    }
    rec.update(over)
    return rec


def encoded(now: float, **over: Any) -> bytes:
    return json.dumps(record(now, **over)).encode()
