"""``python -m ember.autoscaler.monitor --config CLUSTER.yaml --address HOST:PORT``: the
autoscaler's loop as a process (a first version: started by ``AutoscalingCluster`` in tests;
on the head, supervised like the GCS, is a later step). Every ``--interval`` seconds it asks
the GCS for ``cluster_info`` and runs one ``Reconciler`` tick. The cluster token comes from
``EMBER_TOKEN`` (never argv, which every local user can read). SIGTERM ends it after the
current tick.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from typing import Any

from ember.autoscaler.config import ConfigError, load_config
from ember.autoscaler.fake_multinode import FakeMultiNodeProvider
from ember.autoscaler.node_provider import NodeProvider
from ember.autoscaler.reconciler import Reconciler
from ember.autoscaler.sdk import KV_KEY, KV_NAMESPACE, read_request
from ember.cluster_address import find_gcs_address, token_for
from ember.protocol import connection as conn_mod

GCS_CALL_TIMEOUT_S = 10.0


def make_provider(config: dict[str, Any]) -> NodeProvider:
    kind = config["provider"]["type"]
    if kind == "fake_multinode":
        return FakeMultiNodeProvider(config["provider"], config["cluster_name"])
    # The providers for machines people have (autoscaler/providers/), imported when named.
    if kind == "local":
        from ember.autoscaler.providers.local import LocalNodeProvider

        # It logs in to the hosts itself, so it reads the config's auth section too.
        provider_config = {**config["provider"], "auth": config.get("auth") or {}}
        return LocalNodeProvider(provider_config, config["cluster_name"])
    if kind == "slurm":
        from ember.autoscaler.providers.slurm import SlurmNodeProvider

        return SlurmNodeProvider(config["provider"], config["cluster_name"])
    if kind == "external":
        from ember.autoscaler.providers.external import load_external_provider

        return load_external_provider(config["provider"], config["cluster_name"])
    raise NotImplementedError(
        f"provider.type {kind!r} has no node provider yet: for Kubernetes, deploy with the "
        "manifests in deploy/kubernetes/ (docs/deploying.md)"
    )


def cluster_info(gcs_address: str, token: bytes | None) -> tuple[dict[str, Any], list]:
    """The GCS's cluster_info and the request_resources bundles stored in its KV."""

    async def ask() -> tuple[dict[str, Any], list]:
        conn = await conn_mod.connect(gcs_address, name="gcs", token=token, timeout=5.0)
        try:
            info = await conn.call("cluster_info", None, timeout=GCS_CALL_TIMEOUT_S)
            kv = {"namespace": KV_NAMESPACE, "key": KV_KEY}
            stored = await conn.call("kv_get", kv, timeout=GCS_CALL_TIMEOUT_S)
            return info, read_request(stored)
        finally:
            conn.close()

    loop = conn_mod.new_event_loop()
    try:
        return loop.run_until_complete(ask())
    finally:
        loop.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ember.autoscaler.monitor")
    parser.add_argument("--config", required=True, help="the cluster.yaml")
    parser.add_argument("--address", required=True, help="the head's GCS HOST:PORT")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between ticks")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    gcs_address = find_gcs_address(args.address)
    token = token_for(gcs_address)
    try:
        provider = make_provider(config)
    except (ValueError, NotImplementedError) as e:
        # A provider that cannot start (an external module that does not import, a key
        # file that is missing): said once, plainly, not as a traceback.
        print(f"{args.config}: {e}", file=sys.stderr)
        return 2
    reconciler = Reconciler(config, provider)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    while not stopping:
        try:
            info, requested = cluster_info(gcs_address, token)
            reconciler.tick(info, time.time(), requested)
        except (OSError, TimeoutError, RuntimeError) as e:
            # The GCS restarting, a node that failed to start: logged, tried next tick.
            logging.warning("tick failed: %s", e)
        deadline = time.monotonic() + args.interval
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
