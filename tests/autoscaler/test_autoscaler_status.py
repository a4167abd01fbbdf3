"""The status record as a pure function of the loop's state, and the pieces it reads: the
instance table's round trip through the KV, per-type backoff, the scheduler's reasons and
the types it must not launch."""

from __future__ import annotations

import json

from ember.autoscaler.backoff import Backoff
from ember.autoscaler.config import prepare_config
from ember.autoscaler.instance import Instance, InstanceState, from_record, to_record
from ember.autoscaler.scheduler import Demand, NodeView, PlacementGroupDemand, schedule
from ember.autoscaler.status import build_status, mask_secrets

NOW = 50_000.0
CONFIG = prepare_config(
    {
        "cluster_name": "t",
        "provider": {"type": "fake_multinode", "token": "abc"},
        "auth": {"ssh_user": "u", "ssh_private_key": "~/.ssh/k"},
        "max_workers": 4,
        "idle_timeout_minutes": 2,
        "available_node_types": {
            "head": {"resources": {"CPU": 2}, "node_config": {}},
            "cpu": {"resources": {"CPU": 4}, "node_config": {}, "max_workers": 3},
            "gpu": {"resources": {"CPU": 4, "GPU": 1}, "node_config": {}, "max_workers": 1},
        },
        "head_node_type": "head",
    }
)
HEAD = NodeView("h" * 56, "head", {"CPU": 2.0}, {"CPU": 0.0}, is_head=True)


def _info() -> dict:
    """A cluster_info reply as the GCS sends it: a busy head, one worker, what waits."""
    return {
        "nodes": [
            {
                "node_id": b"\x01" * 28,
                "state": "ALIVE",
                "is_head": True,
                "resources_total": {"CPU": 2.0},
                "resources_available": {"CPU": 0.5},
                "pending_demands": [
                    {"shape": {"CPU": 1.0}, "count": 3},
                    {"shape": {"CPU_group_" + "a" * 32: 1.0}, "count": 1},
                ],
            },
            {
                "node_id": b"\x02" * 28,
                "state": "ALIVE",
                "resources_total": {"CPU": 4.0},
                "resources_available": {"CPU": 4.0},
            },
            {"node_id": b"\x03" * 28, "state": "DEAD", "resources_total": {"CPU": 9.0}},
        ],
        "pending_actors": [{"resources": {"CPU": 2.0}}, {"resources": {"CPU": 2.0}}],
        "placement_groups": [
            {
                "placement_group_id": "ab" * 16,
                "state": "PENDING",
                "strategy": "STRICT_SPREAD",
                "bundles": [{"CPU": 1.0}, {"CPU": 1.0}],
            }
        ],
    }


def test_the_record_says_what_the_loop_knows() -> None:
    running = Instance.requested("i-1", "cpu", NOW - 30)
    for event in ("launch", "created", "joined"):
        running.fire(event, NOW - 20)
    running.node_id, running.ip = (b"\x02" * 28).hex(), "10.0.0.2"
    joining = Instance.requested("i-2", "gpu", NOW - 5)
    joining.fire("launch", NOW - 5)
    joining.fire("created", NOW - 4)
    old = Instance.requested("i-3", "cpu", NOW - 2000)
    old.fire("launch", NOW - 2000)
    old.fire("launch_failed", NOW - 1999, "quota")
    decisions = [
        {
            "time": NOW,
            "action": "launch",
            "node_type": "gpu",
            "instance_id": None,
            "count": 1,
            "reason": "x",
        }
    ] * 250
    st = build_status(
        config=CONFIG,
        instances=[running, joining, old],
        info=_info(),
        requested=[{"CPU": 8.0}],
        infeasible=[{"shape": {"TPU": 1.0}, "count": 2, "since": NOW - 9}],
        decisions=decisions,
        counters={"started": 2, "stopped": 0, "failed_create": 1, "failed_join": 0},
        backoff={"cpu": {"failures": 1, "until": NOW + 5}},
        idle_since={running.node_id: NOW - 7},
        now=NOW,
        monitor_pid=4242,
    )
    assert (st["version"], st["time"], st["cluster_name"], st["monitor_pid"]) == (1, NOW, "t", 4242)
    assert st["config"]["auth"] == {"ssh_user": "u", "ssh_private_key": "***"}
    assert st["config"]["provider"]["token"] == "***"
    assert st["node_types"]["cpu"] == {
        "min_workers": 0,
        "max_workers": 3,
        "resources": {"CPU": 4},
        "running": 1,
        "pending": 0,
    }
    assert (st["node_types"]["gpu"]["pending"], st["node_types"]["head"]["running"]) == (1, 1)
    # The failed launch ended 1999 s ago: past the 10 minutes ended instances are kept.
    assert [(i["instance_id"], i["state"]) for i in st["instances"]] == [
        ("i-1", "running"),
        ("i-2", "joining"),
    ]
    row = st["instances"][0]
    assert (row["node_id"], row["ip"], row["since"], row["idle_since"], row["error"]) == (
        running.node_id,
        "10.0.0.2",
        NOW - 20,
        NOW - 7,
        None,
    )
    assert st["demand"] == {
        "leases": [{"shape": {"CPU": 1.0}, "count": 3}],  # work in a group is the group's
        "actors": [{"shape": {"CPU": 2.0}, "count": 2}],
        "placement_groups": [
            {"id": "ab" * 16, "strategy": "STRICT_SPREAD", "bundles": [{"CPU": 1.0}] * 2}
        ],
        "request_resources": [{"CPU": 8.0}],
    }
    assert st["usage"] == {"CPU": [1.5, 6.0]}  # the dead node counts for nothing
    assert len(st["decisions"]) == 200
    assert st["infeasible"] == [{"shape": {"TPU": 1.0}, "count": 2, "since": NOW - 9}]
    assert (st["idle_timeout_s"], st["upscaling_speed"]) == (120.0, 1.0)
    json.dumps(st)  # the record is JSON as it is


def test_secrets_are_masked_wherever_they_are() -> None:
    config = {
        "a": {"password": "p", "list": [{"api_token": "t"}]},
        "ssh_private_key": "",
        "name": "token-free",
    }
    assert mask_secrets(config) == {
        "a": {"password": "***", "list": [{"api_token": "***"}]},
        "ssh_private_key": "",  # nothing to hide
        "name": "token-free",
    }


def test_an_instance_read_back_is_where_it_was_left() -> None:
    inst = Instance.requested("i-9", "cpu", 1.0)
    inst.fire("launch", 2.0)
    inst.fire("created", 3.0)
    inst.provider_node_id, inst.ip, inst.note = "fake-1", "127.0.0.1", "n"
    back = from_record(json.loads(json.dumps(to_record(inst))))
    assert (back.state, back.since, back.provider_node_id, back.ip, back.note) == (
        InstanceState.JOINING,
        3.0,
        "fake-1",
        "127.0.0.1",
        "n",
    )
    assert back.fire("joined", 4.0) is InstanceState.RUNNING  # and moves on from there


def test_backoff_doubles_per_failure_up_to_its_cap_and_a_join_resets_it() -> None:
    b = Backoff(base_s=5, max_s=30)
    assert [b.failed("cpu", 0.0) for _ in range(5)] == [5, 10, 20, 30, 30]
    assert b.blocked(29.0) == {"cpu"} and b.blocked(31.0) == set()
    b.succeeded("cpu")
    assert b.failed("cpu", 100.0) == 5
    again = Backoff()
    again.restore(b.to_record())
    assert again.blocked(104.0) == {"cpu"} and again.failures == {"cpu": 1}


def test_a_type_in_backoff_is_not_launched_and_its_demand_waits() -> None:
    demand = Demand(shapes=({"CPU": 4.0},))
    assert schedule(CONFIG, [HEAD], demand, NOW).launch == {"cpu": 1}
    blocked = schedule(CONFIG, [HEAD], demand, NOW, unavailable={"cpu"})
    # The gpu type could hold it but wastes a GPU: still the only type left, it is used.
    assert blocked.launch == {"gpu": 1}
    both = schedule(CONFIG, [HEAD], demand, NOW, unavailable={"cpu", "gpu"})
    assert both.launch == {} and both.unmet == [{"CPU": 4.0}] and both.infeasible == []


def test_each_launch_says_what_it_is_for() -> None:
    config = {**CONFIG, "available_node_types": {**CONFIG["available_node_types"]}}
    config["available_node_types"]["cpu"] = {
        **config["available_node_types"]["cpu"],
        "min_workers": 1,
    }
    demand = Demand(
        shapes=({"CPU": 1.0}, {"CPU": 1.0}, {"GPU": 1.0}),
        placement_groups=(PlacementGroupDemand(({"CPU": 4.0}, {"CPU": 4.0}), "STRICT_SPREAD"),),
    )
    d = schedule(config, [HEAD], demand, NOW)
    assert d.launch == {"cpu": 2, "gpu": 1}
    assert sorted(d.reasons["cpu"]) == [
        "min_workers 1: 1 x {'CPU': 4.0}",
        "placement group (STRICT_SPREAD): 1 x {'CPU': 4.0}",
    ]
    assert d.reasons["gpu"] == [
        "queued tasks and pending actors: 2 x {'CPU': 1.0}, 1 x {'GPU': 1.0}"
    ]
