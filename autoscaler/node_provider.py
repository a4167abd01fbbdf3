"""The interface every node provider implements (Ray's ``NodeProvider``): the autoscaler asks
a provider for machines and gives them back, and knows them only by the provider's node id
and their tags. Tags are how a restarted autoscaler finds the nodes it made and their types.

Implementations: ``fake_multinode.py`` (local processes). SSH hosts, Slurm, external modules
and Kubernetes are later steps (issue 34).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

# Tag names (Ray's ``autoscaler/tags.py``, Ember's prefix).
TAG_NODE_KIND = "ember-node-kind"  # "head" | "worker"
TAG_USER_NODE_TYPE = "ember-user-node-type"  # the available_node_types key
TAG_NODE_STATUS = "ember-node-status"  # "uninitialized" | "up-to-date" | "update-failed"...
TAG_NODE_NAME = "ember-node-name"
TAG_CLUSTER_NAME = "ember-cluster-name"
# The autoscaler's instance id: a restarted autoscaler matches a launch in flight to its node.
TAG_INSTANCE_ID = "ember-instance-id"
NODE_KIND_HEAD = "head"
NODE_KIND_WORKER = "worker"


class NodeProvider(ABC):
    """One cluster's machines at one provider. Every method may be called from the
    autoscaler's loop only; implementations need not be thread-safe, unless they set
    ``launches_in_parallel``: then the loop makes a tick's ``create_node`` calls (one node
    each), and then its ``terminate_node`` calls, from several threads at once and waits for
    them all."""

    launches_in_parallel = False

    def __init__(self, provider_config: Mapping[str, Any], cluster_name: str) -> None:
        self.provider_config = dict(provider_config)
        self.cluster_name = cluster_name

    @abstractmethod
    def non_terminated_nodes(self, tag_filters: Mapping[str, str]) -> list[str]:
        """Ids of this cluster's nodes that are pending or running, whose tags include
        every ``tag_filters`` item."""

    @abstractmethod
    def node_tags(self, node_id: str) -> dict[str, str]:
        """The node's tags."""

    @abstractmethod
    def set_node_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        """Adds or replaces the given tags on the node."""

    @abstractmethod
    def internal_ip(self, node_id: str) -> str:
        """The address other nodes of the cluster reach it at."""

    def external_ip(self, node_id: str) -> str | None:
        """The address this machine reaches it at, if it has one apart from internal_ip."""
        return None

    @abstractmethod
    def create_node(
        self, node_config: Mapping[str, Any], tags: Mapping[str, str], count: int
    ) -> dict[str, dict[str, Any]]:
        """Starts ``count`` nodes; {node id: facts} of those made. Raises on a refusal
        (quota, a host down), with the provider's own message."""

    def create_node_with_resources_and_labels(
        self,
        node_config: Mapping[str, Any],
        tags: Mapping[str, str],
        count: int,
        resources: Mapping[str, float],
        labels: Mapping[str, str],
    ) -> dict[str, dict[str, Any]]:
        """As ``create_node``, for providers that must tell a node its resources and labels
        (local processes; a Slurm job); others get them from the machine."""
        return self.create_node(node_config, tags, count)

    @abstractmethod
    def terminate_node(self, node_id: str) -> None:
        """Stops the node; a node already gone is not an error (terminate is retried)."""

    def terminate_nodes(self, node_ids: Sequence[str]) -> dict[str, Exception]:
        """Stops several nodes (a tick's); {node id: error} of those that would not stop.
        Ray's providers have this too; one that can stop many in one pass overrides it."""
        errors: dict[str, Exception] = {}
        for node_id in node_ids:
            try:
                self.terminate_node(node_id)
            except Exception as e:  # asked again next tick
                errors[node_id] = e
        return errors


class StartsEmberNodes(NodeProvider):
    """A provider that starts ``ember start`` itself (local processes, SSH hosts, Slurm jobs)
    and so tells each node its resources and labels: ``create_node`` is
    ``create_node_with_resources_and_labels`` with none, which such a provider defines."""

    def create_node(
        self, node_config: Mapping[str, Any], tags: Mapping[str, str], count: int
    ) -> dict[str, dict[str, Any]]:
        return self.create_node_with_resources_and_labels(node_config, tags, count, {}, {})

    @abstractmethod
    def create_node_with_resources_and_labels(
        self,
        node_config: Mapping[str, Any],
        tags: Mapping[str, str],
        count: int,
        resources: Mapping[str, float],
        labels: Mapping[str, str],
    ) -> dict[str, dict[str, Any]]: ...
