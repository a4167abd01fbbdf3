"""``python -m ember.autoscaler.monitor --config CLUSTER.yaml --address HOST:PORT``: the
autoscaler's loop as a process. Every ``--interval`` seconds it asks the GCS for
``cluster_info`` and runs one ``Reconciler`` tick, which writes the status record
(``status.py``) to the GCS's KV. The instance table it keeps in the KV too, read back at
start, so a monitor killed and started again neither launches twice nor forgets a node.
The cluster token comes from ``EMBER_TOKEN`` (never argv, which every local user can read).
SIGTERM ends it after the current tick.

Timings for tests and slow providers come from the environment:
``EMBER_AUTOSCALER_JOIN_TIMEOUT_S`` (300), ``EMBER_AUTOSCALER_BACKOFF_S`` (5, doubled per
failure in a row, at most ``EMBER_AUTOSCALER_BACKOFF_MAX_S``, 300).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from ember.autoscaler.backoff import Backoff
from ember.autoscaler.config import ConfigError, load_config
from ember.autoscaler.fake_multinode import FakeMultiNodeProvider
from ember.autoscaler.node_provider import NodeProvider
from ember.autoscaler.reconciler import STATE_KEY, Reconciler
from ember.autoscaler.sdk import KV_KEY, KV_NAMESPACE, read_request
from ember.cluster_address import find_gcs_address, token_for
from ember.protocol import connection as conn_mod

GCS_CALL_TIMEOUT_S = 10.0


def fake_provider_defaults(
    provider: dict[str, Any], gcs_address: str, token: bytes | None
) -> dict[str, Any]:
    """A fake_multinode provider section as the head's monitor runs it: nodes join this
    monitor's GCS, live under a directory named by its port (short: Unix socket paths), and
    get the cluster token; what the config says wins."""
    port = gcs_address.rpartition(":")[2]
    return {
        "gcs_address": gcs_address.removeprefix("tcp:"),
        "temp_dir": os.path.join(tempfile.gettempdir(), f"ember-fake-{port}"),
        **({"token": token} if token else {}),
        **provider,
    }


def make_provider(config: dict[str, Any]) -> NodeProvider:
    kind = config["provider"]["type"]
    if kind == "fake_multinode":
        return FakeMultiNodeProvider(config["provider"], config["cluster_name"])
    # The providers for machines people have (autoscaler/providers/), imported when named.
    if kind == "local":
        from ember.autoscaler.host_setup import worker_setup
        from ember.autoscaler.providers.local import LocalNodeProvider

        # It logs in to the hosts itself, so it reads the config's auth section too, and it
        # sets up each host before starting a node there.
        provider_config = {
            **config["provider"],
            "auth": config.get("auth") or {},
            "worker_setup": worker_setup(config),
        }
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


class GcsLink:
    """One connection to the GCS, made again when it breaks (the GCS restarting); every
    call has a deadline. The reconciler's ``ClusterSide``."""

    def __init__(self, address: str, token: bytes | None) -> None:
        self.address = address
        self.token = token
        self.loop = conn_mod.new_event_loop()
        self.conn: Any = None

    def call(self, op: str, body: Any = None, timeout: float = GCS_CALL_TIMEOUT_S) -> Any:
        async def ask() -> Any:
            if self.conn is None or self.conn.closed:
                self.conn = await conn_mod.connect(
                    self.address, name="gcs", token=self.token, timeout=5.0
                )
            return await self.conn.call(op, body, timeout=timeout)

        try:
            return self.loop.run_until_complete(ask())
        except (OSError, TimeoutError, conn_mod.ConnectionClosedError):
            self.close_conn()
            raise

    def cluster_info(self) -> tuple[dict[str, Any], list]:
        """The GCS's cluster_info and the request_resources bundles stored in its KV."""
        info = self.call("cluster_info")
        stored = self.get(KV_KEY)
        return info, read_request(stored)

    def get(self, key: bytes) -> bytes | None:
        return self.call("kv_get", {"namespace": KV_NAMESPACE, "key": key})

    def put(self, key: bytes, value: bytes) -> None:
        self.call("kv_put", {"namespace": KV_NAMESPACE, "key": key, "value": value})

    def wait_demand(self, seen: int | None, until: float, stopping: Callable[[], bool]) -> None:
        """Returns at ``until`` (monotonic), when ``stopping()``, or as soon as the GCS says
        new demand appeared since its cluster_info said ``seen``: a burst is launched for at
        once, not at the next tick. Waits in slices of at most a second, so a SIGTERM is
        heeded within one; a GCS that cannot say (or is away) is waited out by sleeping."""
        while not stopping() and (left := until - time.monotonic()) > 0:
            if seen is None:
                time.sleep(min(left, 0.05))
                continue
            wait = min(left, 1.0)
            body = {"seen": seen, "timeout": wait}
            try:
                version = self.call("wait_demand", body, timeout=wait + 5.0)["demand_version"]
            except Exception:  # the GCS restarting, or one that has no wait_demand
                self.close_conn()
                seen = None
                continue
            if version != seen:
                return

    def drain_node(self, node_id: str, reason: str, draining: bool) -> dict[str, Any]:
        body = {"node_id": bytes.fromhex(node_id), "reason": reason, "draining": draining}
        return self.call("drain_node", body)

    def close_conn(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def close(self) -> None:
        self.close_conn()
        self.loop.close()


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r}: expected a number of seconds") from None


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _reload(path: str, reconciler: Reconciler, gcs_address: str, token: bytes | None) -> None:
    """The changed config, if it is valid (else the running one stays, and the log says
    why); the provider is made again from it (it reads its own table back)."""
    try:
        config = load_config(path)
        if config["provider"]["type"] == "fake_multinode":
            config["provider"] = fake_provider_defaults(config["provider"], gcs_address, token)
        provider = make_provider(config)
    except (ConfigError, ValueError, NotImplementedError) as e:
        logging.error("the changed config is not applied: %s", e)
        return
    reconciler.config, reconciler.provider = config, provider
    logging.info("config reloaded from %s", path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ember.autoscaler.monitor")
    parser.add_argument("--config", required=True, help="the cluster.yaml")
    parser.add_argument("--address", required=True, help="the head's GCS HOST:PORT")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between ticks")
    parser.add_argument("--parent-pid", type=int, default=0, help="end with this process")
    args = parser.parse_args(argv)
    if args.parent_pid:  # supervised by the head's raylet: never outlive it
        from ember.process_util import die_with_parent

        die_with_parent(args.parent_pid)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    gcs_address = find_gcs_address(args.address)
    token = token_for(gcs_address)
    link = GcsLink(gcs_address, token)
    if config["provider"]["type"] == "fake_multinode":
        config["provider"] = fake_provider_defaults(config["provider"], gcs_address, token)
    try:
        provider = make_provider(config)
    except (ValueError, NotImplementedError) as e:
        # A provider that cannot start (an external module that does not import, a key
        # file that is missing): said once, plainly, not as a traceback.
        print(f"{args.config}: {e}", file=sys.stderr)
        return 2
    backoff = Backoff(
        _env_float("EMBER_AUTOSCALER_BACKOFF_S", 5.0),
        _env_float("EMBER_AUTOSCALER_BACKOFF_MAX_S", 300.0),
    )
    join_timeout = _env_float("EMBER_AUTOSCALER_JOIN_TIMEOUT_S", 300.0)
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    saved = None
    deadline = time.monotonic() + 60.0
    while not stopping:  # the table first: launching without it could launch twice
        try:
            saved = link.get(STATE_KEY)
            break
        except (OSError, TimeoutError, RuntimeError) as e:
            if token is None and (token := token_for(gcs_address)):
                # Started beside a head whose session did not exist yet: its token is
                # there now. Without it the GCS refuses every call until the deadline.
                link.token = token
                link.close_conn()
                if config["provider"]["type"] == "fake_multinode":
                    config["provider"] = fake_provider_defaults(
                        config["provider"], gcs_address, token
                    )
                    provider = make_provider(config)
                continue
            if time.monotonic() > deadline:
                print(f"the GCS at {gcs_address} did not answer for 60 s: {e}", file=sys.stderr)
                return 1
            time.sleep(0.5)
    reconciler = Reconciler(
        config,
        provider,
        link,
        join_timeout_s=join_timeout,
        backoff=backoff,
        saved=saved,
    )
    logging.info("autoscaler started (pid %d) for cluster %s", os.getpid(), config["cluster_name"])
    seen = _mtime(args.config)
    info: dict[str, Any] | None = None
    while not stopping:
        if _mtime(args.config) != seen:  # ``ember up`` with a changed config: applied live
            seen = _mtime(args.config)
            _reload(args.config, reconciler, gcs_address, token)
        try:
            info, requested = link.cluster_info()
            reconciler.tick(info, time.time(), requested)  # writes the status record too
        except (OSError, TimeoutError) as e:
            # The GCS restarting: logged, tried next tick.
            logging.warning("tick failed: %s", e)
        except Exception:
            # A bug or a provider's surprise must not end the loop (nodes would be left
            # unmanaged): the traceback goes to the log, the next tick tries again.
            logging.exception("tick failed")
        wake = time.monotonic() + args.interval
        if reconciler.next_idle_due is not None:  # an idle timeout ends before the next tick
            wake = min(wake, time.monotonic() + max(0.05, reconciler.next_idle_due - time.time()))
        link.wait_demand(info.get("demand_version") if info else None, wake, lambda: bool(stopping))
    finish = getattr(provider, "finish_stops", None)
    if finish is not None:  # a provider stopping nodes in the background ends those stops
        finish(30.0)
    link.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
