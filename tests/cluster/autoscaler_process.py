"""What the node providers' tests (test_provider_*.py) share: a head with no CPUs started as a
user would (``ember start --head``), the autoscaler as its own process on a config file, and
a driver whose one task needs 2 CPUs, so only a node the autoscaler adds can run it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import yaml
from ember_test_utils import ember_cli, free_port

EMBER = ember_cli()

# Runs one task needing 2 CPUs; prints its node's IP and labels as JSON (the provider's node
# id is a label). With a marker path: the first attempt makes the file and sleeps (its node
# is then ended under it), the retry returns at once.
DRIVER = textwrap.dedent(
    """
    import json, os, sys, time, ember
    ember.init(address=sys.argv[1])
    marker = sys.argv[2] if len(sys.argv) > 2 else ""
    @ember.remote(num_cpus=2, max_retries=3)
    def where(marker):
        if marker and not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(600)
        context = ember.get_runtime_context()
        return {"node_id": context.get_node_id(), "labels": context.get_node_labels()}
    ran = ember.get(where.remote(marker), timeout=400)
    ran["ip"] = next(n["NodeManagerAddress"] for n in ember.nodes() if n["NodeID"] == ran["node_id"])
    print(json.dumps(ran), flush=True)
    """
)


def start_head(temp_dir: str, node_ip: str | None = None) -> tuple[str, str]:
    """A head with no CPUs under ``temp_dir``; (its GCS HOST:PORT, the cluster token)."""
    argv = [EMBER, "start", "--head", "--port", str(free_port()), "--num-cpus", "0"]
    argv += ["--temp-dir", temp_dir, "--object-store-memory", str(64 * 1024**2)]
    argv += ["--include-dashboard", "false"]
    if node_ip:
        argv += ["--node-ip-address", node_ip]
    started = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert started.returncode == 0, started.stderr
    token = started.stdout.split("--token=")[1].split()[0]
    address = started.stdout.split("--address='")[1].split("'")[0]
    return address, token


def start_driver(gcs: str, token: str, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, gcs, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**(env or os.environ), "EMBER_TOKEN": token},
    )


class Monitor:
    """``python -m ember.autoscaler.monitor`` on ``config`` (written to ROOT/NAME.yaml), with
    the token in its environment only; its log in ROOT/NAME-autoscaler.log."""

    def __init__(self, root: str, config: dict, token: str, env: dict | None = None) -> None:
        name = config["cluster_name"]
        self.path = f"{root}/{name}.yaml"
        with open(self.path, "w") as f:
            yaml.safe_dump(config, f)
        self.log_path = f"{root}/{name}-autoscaler.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ember.autoscaler.monitor", "--config", self.path]
                + ["--address", config["provider"]["gcs_address"], "--interval", "0.5"],
                stdout=log,
                stderr=log,
                # A failed launch is retried after 1 s, not the default backoff's 5 s and up.
                env={
                    **(env or os.environ),
                    "EMBER_TOKEN": token,
                    "EMBER_AUTOSCALER_BACKOFF_S": "1",
                },
            )

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
