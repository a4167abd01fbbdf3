"""Fixtures for multi-node tests: real clusters on this machine (``ember.cluster_utils``)."""

from __future__ import annotations

import ember
import pytest
from ember.cluster_utils import Cluster

# Short membership timings so failure tests take seconds, not minutes.
FAST_FAILURE_ENV = {
    "EMBER_HEARTBEAT_INTERVAL": "0.2",
    "EMBER_NODE_DEATH_TIMEOUT": "2",
    # A head that is gone (not restarting its GCS) is given up on in seconds.
    "EMBER_GCS_RECONNECT_TIMEOUT": "4",
}


@pytest.fixture
def cluster_factory():
    """Makes clusters (head options as keyword arguments); all stopped after the test."""
    if ember.is_initialized():
        ember.shutdown()
    made: list[Cluster] = []

    def make(**head_args) -> Cluster:
        c = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, **head_args},
            env=FAST_FAILURE_ENV,
        )
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.shutdown()


@pytest.fixture
def cluster(cluster_factory):
    """A head (1 CPU) for one test; add nodes with ``cluster.add_node``."""
    return cluster_factory()
