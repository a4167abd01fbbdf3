"""One autoscaler tick: read the cluster, decide (``scheduler.schedule``), act on the provider.
A first, small I/O shell: it keeps no state beyond the provider's own table and the idle
clock, so it is safe to restart; the instance lifecycle, join timeouts, backoff and draining
are later steps.

A provider's node and its Ember node are matched by the node's ``ember.io/provider-node-id``
label, which the provider gives the node at launch. A provider node whose Ember node has not
joined yet counts as a pending launch, so a tick never launches twice for the same demand.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ember.autoscaler.demand import (
    IdleClock,
    demand_from_cluster_info,
    nodes_from_cluster_info,
)
from ember.autoscaler.node_provider import (
    NODE_KIND_WORKER,
    TAG_CLUSTER_NAME,
    TAG_NODE_KIND,
    TAG_USER_NODE_TYPE,
    NodeProvider,
)
from ember.autoscaler.scheduler import Decision, schedule

PROVIDER_NODE_LABEL = "ember.io/provider-node-id"
log = logging.getLogger("ember.autoscaler")


class Reconciler:
    def __init__(self, config: Mapping[str, Any], provider: NodeProvider) -> None:
        self.config = config
        self.provider = provider
        self.clock = IdleClock()

    def tick(
        self, info: Mapping[str, Any], now: float, requested: Sequence[Mapping[str, float]] = ()
    ) -> Decision:
        """Reads ``info`` (the GCS's cluster_info) and ``requested`` (request_resources'
        bundles), launches and terminates; the decision."""
        mine = {TAG_CLUSTER_NAME: self.config["cluster_name"]}
        provider_ids = self.provider.non_terminated_nodes(mine)
        joined: dict[str, str] = {}  # provider node id -> Ember node id (hex)
        for node in info.get("nodes") or ():
            pid = (node.get("labels") or {}).get(PROVIDER_NODE_LABEL)
            if node.get("state") == "ALIVE" and pid:
                raw = node["node_id"]
                joined[pid] = raw.hex() if isinstance(raw, bytes) else str(raw)
        pending: dict[str, int] = {}
        for pid in provider_ids:
            if pid not in joined:
                node_type = self.provider.node_tags(pid).get(TAG_USER_NODE_TYPE, "")
                pending[node_type] = pending.get(node_type, 0) + 1
        nodes = nodes_from_cluster_info(info, self.config["head_node_type"], self.clock, now)
        decision = schedule(
            self.config, nodes, demand_from_cluster_info(info, requested), now, pending
        )

        for node_type, count in decision.launch.items():
            spec = self.config["available_node_types"][node_type]
            tags = {**mine, TAG_NODE_KIND: NODE_KIND_WORKER, TAG_USER_NODE_TYPE: node_type}
            log.info("launching %d x %s", count, node_type)
            self.provider.create_node_with_resources_and_labels(
                spec["node_config"], tags, count, spec["resources"], spec.get("labels", {})
            )
        by_ember_id = {ember_id: pid for pid, ember_id in joined.items()}
        for t in decision.terminate:
            pid = by_ember_id.get(t.node_id)
            if pid is None:  # not a node this provider made: never ours to stop
                continue
            log.info("terminating %s (%s): %s", pid, t.node_type, t.reason)
            self.provider.terminate_node(pid)
        for shape in decision.infeasible:
            log.warning("infeasible demand: no node type can hold %s", shape)
        return decision
