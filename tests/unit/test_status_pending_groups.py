"""``ember status``'s pending placement groups: what a waiting group still needs."""

from __future__ import annotations

from ember.cli.status import _pending_groups

NODE = {"total": {"CPU": 1.0}}


def test_a_rescheduling_group_asks_only_for_the_bundles_it_lost() -> None:
    groups = [
        {
            "state": "RESCHEDULING",
            "strategy": "SPREAD",
            "bundles": [{"CPU": 1}, {"CPU": 1, "GPU": 1}],
            "bundle_nodes": ["a" * 56, None],
        },
        {"state": "CREATED", "strategy": "PACK", "bundles": [{"CPU": 1}], "bundle_nodes": ["b"]},
    ]
    [entry] = _pending_groups(groups, [NODE])
    assert entry["bundles"] == [{"CPU": 1.0, "GPU": 1.0}]
    assert entry["strategy"] == "SPREAD" and entry["count"] == 1
    assert entry["infeasible"] is True  # no node alive has a GPU


def test_a_pending_group_asks_for_all_its_bundles() -> None:
    groups = [{"state": "PENDING", "strategy": "PACK", "bundles": [{"CPU": 1}, {"CPU": 1}]}]
    [entry] = _pending_groups(groups, [NODE])
    assert entry["bundles"] == [{"CPU": 1.0}, {"CPU": 1.0}] and entry["infeasible"] is False
