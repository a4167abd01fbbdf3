"""``ember status``'s autoscaler section (Ray's ``ray status`` layout), from a status record
as the GCS's KV holds it: shown while the record is fresh, the plain cluster status without
one or with a stale one. The same against the real monitor's record:
tests/frontend/test_autoscaler_views.py."""

from __future__ import annotations

import json
import time

from autoscaler_status_record import NODE_A, NODE_B, encoded
from ember.cli.status import render, summarize


def _info(raw: bytes | None, now: float) -> dict:
    def node(nid: str, cpus: float, head: bool) -> dict:
        return {
            "node_id": nid,
            "node_ip": "127.0.0.1",
            "is_head": head,
            "state": "ALIVE",
            "resources_total": {"CPU": cpus},
            "resources_available": {"CPU": 0.0},
        }

    return {
        "now": now,
        "nodes": [node(NODE_A, 1.0, True), node(NODE_B, 2.0, False)],
        "pending_actors": [],
        "placement_groups": [
            {
                "placement_group_id": "c3" * 18,
                "state": "PENDING",
                "strategy": "PACK",
                "bundles": [{"CPU": 4.0}],
            },
        ],
        "autoscaler": raw,
    }


def test_a_fresh_record_shows_the_node_status_by_node_type() -> None:
    now = time.time()
    backoff = {"cpu_node": {"failures": 2, "until": now + 30.4}}
    info = _info(encoded(now, backoff=backoff), now)
    info["nodes"][1]["pending_demands"] = [{"shape": {"CPU": 2.0}, "count": 1}]
    text = render(summarize(info))
    lines = text.splitlines()
    assert lines[0].startswith("======== Autoscaler status: ")
    active = lines.index("Active:")
    assert lines[active + 1] == " 1 head"
    assert lines[active + 2] == f" 1 cpu_node: node_{NODE_B} (127.0.0.1)"
    idle = lines[lines.index("Idle:") + 1]
    assert (
        idle.startswith(f" cpu_node: node_{NODE_B} (127.0.0.1), idle 2") and "removed in 4" in idle
    )
    pending = lines.index("Pending:")
    assert lines[pending + 1 : pending + 3] == [
        " fake-2: cpu_node, launching",
        " cpu_node: launches back off for 30 s more (after 2 failures)",
    ]
    failure = lines[lines.index("Recent failures:") + 1]
    assert failure.startswith(" cpu_node: the node did not join within 30 s (latest_attempt: ")
    assert failure.endswith(", instance fake-0)")
    asked = lines.index("From request_resources:")
    assert lines[asked + 1 : asked + 3] == [
        " {CPU: 1}: 2 from request_resources()",
        " {GPU: 1}: 1 from request_resources()",
    ]
    # With an autoscaler, a demand no live node can hold is feasible when a node type can:
    # 2 CPUs (a cpu_node) is; a 4-CPU bundle is not.
    assert " {CPU: 2}: 1+ pending tasks/actors" in lines
    assert (
        " {CPU: 4} (PACK): 1+ pending placement groups "
        "(infeasible: no node type has these resources)" in lines
    )


def test_the_json_output_carries_the_section() -> None:
    now = time.time()
    section = summarize(_info(encoded(now), now))["autoscaler"]
    assert [t["name"] for t in section["node_types"]] == ["head", "cpu_node"]
    assert [i["instance_id"] for i in section["pending"]] == ["fake-2"]
    assert section["request_resources"] == [
        {"shape": {"CPU": 1.0}, "count": 2},
        {"shape": {"GPU": 1.0}, "count": 1},
    ]
    json.dumps(section)  # plain data


def test_without_a_fresh_record_the_status_is_the_cluster_s_own() -> None:
    now = time.time()
    for raw in (None, encoded(now - 3600), b"not json"):
        text = render(summarize(_info(raw, now)))
        assert text.startswith("======== Cluster status: ")
        assert f" 1 node_{NODE_A} (127.0.0.1, head)" in text.splitlines()
        assert "From request_resources:" not in text
