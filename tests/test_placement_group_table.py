"""Once ``get(pg.ready())`` returns, ``placement_group_table(pg)`` maps every bundle to the
node it was placed on, as Ray guarantees: checked many times right after ready(), both for
groups placed at once and for one that waited until another group's removal freed room
(the path of the semantics comparison, where the table once named no driver node).

That comparison's failure came from an overloaded machine: the GCS, frozen past the node
death timeout, declared its one node dead on waking, the raylet rejoined under a new id and
the next bundle went to that id, while the driver still named the old one. The last test
freezes the GCS (SIGSTOP) past the timeout and checks that nothing of that happens."""

from __future__ import annotations

import os
import signal
import time

import ember
import psutil
from ember.util.placement_group import (
    placement_group,
    placement_group_table,
    remove_placement_group,
)

T = 30


def _bundle_nodes_right_after_ready(pg) -> tuple[str, dict]:
    assert ember.get(pg.ready(), timeout=T) == pg
    entry = placement_group_table(pg)
    return entry["state"], entry["bundles_to_node_id"]


def test_the_table_names_every_bundles_node_as_soon_as_ready_returns(ember_start):
    ember_start(num_cpus=4, num_gpus=2)
    node = ember.get_runtime_context().get_node_id()
    # The driver's node is the one node of the cluster: where every bundle must be.
    assert [n["NodeID"] for n in ember.nodes() if n["Alive"]] == [node]
    for round_ in range(40):
        bundles = [{"CPU": 0.5}, {"CPU": 0.25, "GPU": 1}][: 1 + round_ % 2]
        pg = placement_group(bundles, strategy="PACK" if round_ % 3 else "STRICT_PACK")
        state, nodes = _bundle_nodes_right_after_ready(pg)
        assert (state, nodes) == ("CREATED", dict.fromkeys(range(len(bundles)), node)), round_
        remove_placement_group(pg)


def test_a_group_that_waited_for_room_is_in_the_table_once_ready(ember_start):
    ember_start(num_cpus=4, num_gpus=2)
    node = ember.get_runtime_context().get_node_id()
    for round_ in range(10):
        first = placement_group([{"GPU": 2}])
        ember.get(first.ready(), timeout=T)
        second = placement_group([{"CPU": 1, "GPU": 1}])
        assert placement_group_table(second)["bundles_to_node_id"] == {0: ""}
        remove_placement_group(first)  # a one-way message: second is placed after it
        assert _bundle_nodes_right_after_ready(second) == ("CREATED", {0: node}), round_
        remove_placement_group(second)


def test_a_gcs_frozen_past_the_death_timeout_keeps_its_node(ember_start, monkeypatch):
    # 4 s: the raylet gives up on a GCS after 3 unanswered beats (~7.5 s), longer than the
    # 5 s freeze; the GCS's own timer, on waking, is 5 s past the node's last beat.
    monkeypatch.setenv("EMBER_NODE_DEATH_TIMEOUT", "4")
    ember_start(num_cpus=2)
    node = ember.get_runtime_context().get_node_id()
    [gcs] = [
        p
        for p in psutil.Process().children(recursive=True)
        if "ember.gcs.server" in " ".join(p.cmdline())
    ]
    os.kill(gcs.pid, signal.SIGSTOP)
    try:
        time.sleep(5.0)  # the freeze itself: nothing to poll while the GCS is stopped
    finally:
        os.kill(gcs.pid, signal.SIGCONT)
    pg = placement_group([{"CPU": 1}])
    assert _bundle_nodes_right_after_ready(pg) == ("CREATED", {0: node})
    assert [(n["NodeID"], n["Alive"]) for n in ember.nodes()] == [(node, True)]
    remove_placement_group(pg)
