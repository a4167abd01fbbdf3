"""The ``ember start`` a provider runs to make a worker node join: the head's address, the
node type's resources and labels, and the label by which the autoscaler matches the Ember
node to the provider's node (``ember.io/provider-node-id``). One place, so every provider's
nodes look the same to the scheduler."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from ember.autoscaler.demand import NODE_TYPE_LABEL
from ember.autoscaler.node_provider import TAG_USER_NODE_TYPE
from ember.autoscaler.reconciler import PROVIDER_NODE_LABEL


def ember_start_argv(
    ember: Sequence[str],
    gcs_address: str,
    temp_dir: str,
    provider_node_id: str,
    tags: Mapping[str, str],
    resources: Mapping[str, float],
    labels: Mapping[str, str],
    node_ip: str | None = None,
) -> list[str]:
    """``ember start --address GCS --block ...`` as an argument list (never with the token:
    that goes by environment). Resources not given are detected on the machine."""
    node_labels = {**labels, PROVIDER_NODE_LABEL: provider_node_id}
    if TAG_USER_NODE_TYPE in tags:
        node_labels[NODE_TYPE_LABEL] = tags[TAG_USER_NODE_TYPE]
    argv = [*ember, "start", "--address", gcs_address, "--block", "--temp-dir", temp_dir]
    if node_ip:
        argv += ["--node-ip-address", node_ip]
    return argv + resource_args(resources, node_labels)


def resource_args(resources: Mapping[str, float], labels: Mapping[str, str]) -> list[str]:
    """``ember start``'s flags for a node type's ``resources`` and ``labels`` (a head's or a
    worker's): CPU, GPU, memory and object_store_memory by their own flags, the rest as
    ``--resources`` JSON. Resources not given are detected on the machine."""
    argv: list[str] = []
    res = dict(resources)
    for name, flag in (("CPU", "--num-cpus"), ("GPU", "--num-gpus"), ("memory", "--memory")):
        if name in res:
            argv += [flag, str(res.pop(name))]
    if "object_store_memory" in res:
        argv += ["--object-store-memory", str(int(res.pop("object_store_memory")))]
    if res:
        argv += ["--resources", json.dumps(res, sort_keys=True)]
    if labels:
        argv += ["--labels", json.dumps(dict(labels), sort_keys=True)]
    return argv


def ember_command(provider_config: Mapping[str, object]) -> list[str]:
    """``provider.ember_command``: how to run ``ember`` on the nodes (default ``ember`` on
    their PATH; a venv's ``/opt/venv/bin/ember``, or ``python -m ember.cli.main`` as a list)."""
    given = provider_config.get("ember_command", "ember")
    if isinstance(given, str):
        return [given]
    if isinstance(given, list) and given and all(isinstance(x, str) for x in given):
        return list(given)
    raise ValueError("provider.ember_command must be a path or a list of strings")


def join_token(provider_config: Mapping[str, object], gcs_address: str) -> str:
    """The cluster token nodes join with: ``provider.token`` (best left out of a file),
    else the autoscaler's ``EMBER_TOKEN``, else the head's own session on this machine."""
    from ember.cluster_address import normalize_address, token_for

    token = provider_config.get("token") or os.environ.get("EMBER_TOKEN")
    if not token:
        found = token_for(normalize_address(gcs_address))
        token = found.decode() if found else None
    if not token:
        raise ValueError(
            f"no cluster token to join {gcs_address} with: run the autoscaler with EMBER_TOKEN "
            "set (the head prints the token; it is the cluster_token file of its session)"
        )
    return token.decode() if isinstance(token, bytes) else str(token)


def gcs_address_of(provider_config: Mapping[str, object]) -> str:
    """``provider.gcs_address`` (HOST:PORT), else ``provider.head_ip`` with ``gcs_port``
    (6379, ``ember start --head``'s default)."""
    given = provider_config.get("gcs_address")
    if given:
        return str(given).removeprefix("tcp:")
    head = provider_config.get("head_ip")
    if not head:
        raise ValueError("the provider needs gcs_address (the head's HOST:PORT) or head_ip")
    return f"{head}:{int(provider_config.get('gcs_port', 6379))}"
