"""Choosing a node provider from the config: ``external`` loads a class of the user's own
(here, classes defined in this module) or says exactly why it cannot; the ``local`` and
``slurm`` providers' required fields are named before anything starts; the command runner
quotes what it sends to a remote shell."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest
import yaml
from ember.autoscaler.command_runner import LocalCommandRunner
from ember.autoscaler.config import ConfigError, prepare_config
from ember.autoscaler.monitor import make_provider
from ember.autoscaler.node_provider import NodeProvider
from ember.autoscaler.providers.external import ExternalProviderError, load_provider_class
from ember.autoscaler.providers.slurm import JOB_ID, job_script


class InventoryProvider(NodeProvider):
    """A whole provider, in memory: what a user's module would hold."""

    def __init__(self, provider_config: Mapping[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        self.nodes: dict[str, dict[str, str]] = {}

    def non_terminated_nodes(self, tag_filters: Mapping[str, str]) -> list[str]:
        return [
            n
            for n, tags in self.nodes.items()
            if all(tags.get(k) == v for k, v in tag_filters.items())
        ]

    def node_tags(self, node_id: str) -> dict[str, str]:
        return dict(self.nodes[node_id])

    def set_node_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        self.nodes[node_id].update(tags)

    def internal_ip(self, node_id: str) -> str:
        return self.provider_config["ips"][int(node_id)]

    def create_node(
        self, node_config: Mapping[str, Any], tags: Mapping[str, str], count: int
    ) -> dict[str, dict[str, Any]]:
        made = {}
        for _ in range(count):
            node_id = str(len(self.nodes))
            self.nodes[node_id] = dict(tags)
            made[node_id] = {"tags": dict(tags)}
        return made

    def terminate_node(self, node_id: str) -> None:
        self.nodes.pop(node_id, None)


class RayStyleProvider:
    """Not an Ember NodeProvider subclass, but the same methods (a provider written for Ray)."""

    def __init__(self, provider_config: Mapping[str, Any], cluster_name: str) -> None:
        self.cluster_name = cluster_name

    def non_terminated_nodes(self, tag_filters):
        return []

    node_tags = set_node_tags = internal_ip = create_node = terminate_node = non_terminated_nodes


class HalfProvider:
    def non_terminated_nodes(self, tag_filters):
        return []


class AbstractProvider(NodeProvider):
    def non_terminated_nodes(self, tag_filters):
        return []


class BrokenProvider(InventoryProvider):
    def __init__(self, provider_config: Mapping[str, Any], cluster_name: str) -> None:
        raise KeyError("inventory_url")


NOT_A_CLASS = 42


def _config(provider: dict[str, Any]) -> dict[str, Any]:
    return prepare_config(
        {
            "cluster_name": "ext",
            "provider": provider,
            "available_node_types": {
                "head": {"resources": {"CPU": 1}, "node_config": {}},
                "worker": {"resources": {"CPU": 2}, "node_config": {}},
            },
            "head_node_type": "head",
        }
    )


def test_an_external_provider_class_is_loaded_and_used() -> None:
    config = _config({"type": "external", "module": f"{__name__}.InventoryProvider", "ips": ["a"]})
    provider = make_provider(config)
    assert type(provider).__name__ == "InventoryProvider" and provider.cluster_name == "ext"
    made = provider.create_node({}, {"ember-user-node-type": "worker"}, 1)
    assert list(made) == ["0"]
    assert provider.non_terminated_nodes({"ember-user-node-type": "worker"}) == ["0"]
    assert provider.internal_ip("0") == "a"  # its own provider fields reach it
    # A provider written against Ray's interface (same methods, another base class) loads.
    assert load_provider_class(f"{__name__}.RayStyleProvider") is RayStyleProvider


@pytest.mark.parametrize(
    ("module", "says"),
    [
        ("no_such_pkg_1234.Provider", "cannot import 'no_such_pkg_1234': ModuleNotFoundError"),
        (f"{__name__}.Missing", f"module {__name__!r} has no 'Missing'"),
        (f"{__name__}.NOT_A_CLASS", "is a int, not a class"),
        (
            f"{__name__}.HalfProvider",
            "does not implement the NodeProvider interface (ember.autoscaler.node_provider): "
            "missing or abstract node_tags, set_node_tags, internal_ip, create_node, "
            "terminate_node",
        ),
        (
            f"{__name__}.AbstractProvider",
            "missing or abstract create_node, internal_ip, node_tags, set_node_tags, "
            "terminate_node",
        ),
        (f"{__name__}.BrokenProvider", "the provider failed to start: KeyError: 'inventory_url'"),
    ],
)
def test_a_bad_external_provider_says_what_is_wrong(module: str, says: str) -> None:
    config = _config({"type": "external", "module": module})
    with pytest.raises(ExternalProviderError) as info:
        make_provider(config)
    assert says in str(info.value)
    assert str(info.value).startswith(f"provider.module {module!r}")


def test_the_monitor_exits_with_the_providers_error_not_a_traceback(tmp_path) -> None:
    path = tmp_path / "cluster.yaml"
    raw = {
        "cluster_name": "ext",
        "provider": {"type": "external", "module": "no_such_pkg_1234.Provider"},
        "available_node_types": {"head": {"resources": {}, "node_config": {}}},
        "head_node_type": "head",
    }
    path.write_text(yaml.safe_dump(raw))
    done = subprocess.run(
        [sys.executable, "-m", "ember.autoscaler.monitor", "--config", str(path)]
        + ["--address", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "cannot import 'no_such_pkg_1234'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("provider", "problem"),
    [
        ({"type": "local"}, ("provider.head_ip", "is required")),
        ({"type": "local", "head_ip": "h"}, ("provider.worker_ips", "is required")),
        (
            {"type": "local", "head_ip": "h", "worker_ips": ["a", "a"]},
            ("provider.worker_ips", "['a', 'a'] has non-unique elements"),
        ),
        ({"type": "slurm"}, ("provider.gcs_address", "is required")),
        (
            {"type": "slurm", "gcs_address": "login1"},
            ("provider.gcs_address", "'login1' does not match '^\\\\S+:[0-9]+$'"),
        ),
    ],
)
def test_a_providers_missing_field_is_named_before_anything_starts(provider, problem) -> None:
    with pytest.raises(ConfigError) as info:
        _config(provider)
    assert problem in [(p.path, p.message) for p in info.value.problems]


def test_a_slurm_job_script_quotes_every_value_and_fills_in_its_job_id(tmp_path) -> None:
    odd = str(tmp_path / "it's a dir") + "/" + JOB_ID
    script = job_script(["printf", "[%s]\\n", odd, '{"a": "$HOME `id`"}'], "c", "w")
    path = tmp_path / "job.sh"
    path.write_text(script)
    done = subprocess.run(
        ["sh", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"EMBER_TOKEN": "x", "SLURM_JOB_ID": "417", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"[{tmp_path}/it's a dir/417]", '[{"a": "$HOME `id`"}]']
    # Without the token in its environment the job says so instead of starting a node.
    done = subprocess.run(
        ["sh", str(path)], capture_output=True, text=True, timeout=30, env={"PATH": "/bin"}
    )
    assert done.returncode != 0 and "no EMBER_TOKEN in the job environment" in done.stderr


def test_the_local_runner_passes_secrets_by_environment_and_bounds_output(tmp_path) -> None:
    runner = LocalCommandRunner()
    out = runner.run(
        ["sh", "-c", 'printf %s "$EMBER_TOKEN"'], timeout=30, secret_env={"EMBER_TOKEN": "abc"}
    )
    assert out.stdout == "abc"
    big = runner.run("head -c 1000000 /dev/zero | tr '\\0' x", timeout=30)
    assert len(big.stdout) == 64 * 1024  # the tail only
    with pytest.raises(RuntimeError, match="exit 3: nope"):
        runner.run("echo nope >&2; exit 3", timeout=30)
    with pytest.raises(RuntimeError, match="no end within 0.5 s"):
        runner.run(["sleep", "5"], timeout=0.5)


def test_a_fake_node_recorded_but_never_started_is_started_by_the_next_provider(tmp_path) -> None:
    """A monitor SIGKILLed between recording a node and running its ``ember start``: the
    restarted monitor's provider runs the start (else the node never joins); a node whose
    processes run, or whose start still runs, is left as it is."""
    import json
    import subprocess
    import sys
    import time

    from ember.autoscaler.fake_multinode import FakeMultiNodeProvider

    def argv(node_dir, seconds):
        # Stands in for ``ember start --temp-dir DIR``: names the node's directory, as it does.
        return [sys.executable, "-c", f"import time; time.sleep({seconds})", "start", node_dir]

    never = str(tmp_path / "fake-never000")
    running = str(tmp_path / "fake-running0")
    table = {
        "fake-never000": {
            "tags": {},
            "temp_dir": never,
            "argv": argv(never, 0.3),
            "started": False,
        },
        "fake-running0": {
            "tags": {},
            "temp_dir": running,
            "argv": argv(running, 0),
            "started": False,
        },
        "fake-done0000": {"tags": {}, "temp_dir": str(tmp_path / "d"), "started": True},
    }
    (tmp_path / "fake_multinode_nodes.json").write_text(json.dumps(table))
    # The "running" node's process, as a node's raylet names its session directory.
    node = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "--session-dir", running + "/s"]
    )
    try:
        provider = FakeMultiNodeProvider(
            {"gcs_address": "127.0.0.1:1", "temp_dir": str(tmp_path)}, "c"
        )
        started = provider.nodes["fake-never000"]
        assert started["start_pid"] > 0 and started["started"] is False
        deadline = time.monotonic() + 30
        while not provider.nodes["fake-never000"]["started"]:
            assert time.monotonic() < deadline, "the resumed start never finished"
            time.sleep(0.05)
        assert "start_pid" not in provider.nodes["fake-never000"]
        assert provider.nodes["fake-running0"]["started"] is True  # not started a second time
        assert "start_pid" not in provider.nodes["fake-running0"]
        on_disk = json.loads((tmp_path / "fake_multinode_nodes.json").read_text())
        assert on_disk["fake-never000"]["started"] is True
    finally:
        node.kill()
        node.wait()


def test_fake_nodes_stop_in_the_background_and_stay_listed_until_gone(tmp_path) -> None:
    """``terminate_nodes`` returns at once (a stop must not hold the autoscaler's tick for its
    SIGTERM grace); the node is listed until its processes are gone, and asked again while
    it stops, it is not stopped twice."""
    import json
    import subprocess
    import sys
    import time

    from ember.autoscaler.fake_multinode import FakeMultiNodeProvider

    node_dir = str(tmp_path / "fake-stub0000")
    table = {"fake-stub0000": {"tags": {"k": "v"}, "temp_dir": node_dir, "started": True}}
    (tmp_path / "fake_multinode_nodes.json").write_text(json.dumps(table))
    ignores_sigterm = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    )
    node = subprocess.Popen(
        [
            sys.executable,
            "-c",
            ignores_sigterm,
            "-m",
            "ember.raylet.raylet",
            "--session-dir",
            node_dir + "/s",
        ]
    )
    try:
        time.sleep(0.3)  # its handler is set
        provider = FakeMultiNodeProvider(
            {"gcs_address": "127.0.0.1:1", "temp_dir": str(tmp_path)}, "c"
        )
        assert provider.terminate_nodes(["fake-stub0000", "unknown"]) == {}
        # Its stop waits out the grace (the process ignores SIGTERM): still listed, and a
        # second call while it stops starts nothing.
        assert provider.non_terminated_nodes({"k": "v"}) == ["fake-stub0000"]
        assert provider.terminate_nodes(["fake-stub0000"]) == {}
        deadline = time.monotonic() + 30
        while provider.non_terminated_nodes({"k": "v"}):
            assert time.monotonic() < deadline, "the node was never stopped"
            time.sleep(0.05)
        assert json.loads((tmp_path / "fake_multinode_nodes.json").read_text()) == {}
    finally:
        if node.poll() is None:
            node.kill()
        node.wait()
