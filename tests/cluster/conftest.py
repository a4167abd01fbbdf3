"""Fixtures for multi-node tests: real clusters on this machine (``ember.cluster_utils``)."""

from __future__ import annotations

import ember
import pytest
from ember.cluster_utils import Cluster

# Short membership timings so failure tests take seconds, not minutes.
FAST_FAILURE_ENV = {
    "EMBER_HEARTBEAT_INTERVAL": "0.2",
    "EMBER_NODE_DEATH_TIMEOUT": "2",
}


@pytest.fixture
def cluster():
    """A head (1 CPU) for one test; add nodes with ``cluster.add_node``; stopped afterwards."""
    if ember.is_initialized():
        ember.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1}, env=FAST_FAILURE_ENV)
    try:
        yield c
    finally:
        c.shutdown()
