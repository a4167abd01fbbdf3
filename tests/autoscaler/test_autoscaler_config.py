"""The cluster config: a bad file fails naming each field and what is wrong; a good one gets
Ray's defaults, checked against Ray 2.60's own ``prepare_config`` steps."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ember.autoscaler.config import ConfigError, Problem, load_config, prepare_config
from ember_test_utils import REPO_ROOT, require_ray_python

EXAMPLES = REPO_ROOT / "examples" / "clusters"


def _minimal(**extra: Any) -> dict[str, Any]:
    config = {
        "cluster_name": "t",
        "provider": {"type": "fake_multinode"},
        "available_node_types": {
            "head": {"resources": {"CPU": 1}, "node_config": {}},
            "worker": {"resources": {"CPU": 2}, "node_config": {}},
        },
        "head_node_type": "head",
    }
    config.update(extra)
    return config


def _problems(config: Any) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        prepare_config(config)
    return [(p.path, p.message) for p in info.value.problems]


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_config_is_valid(name: str) -> None:
    config = load_config(EXAMPLES / name)
    assert config["head_node_type"] in config["available_node_types"]


def test_defaults_are_filled_as_ray_fills_them() -> None:
    config = prepare_config(_minimal(setup_commands=["echo common"], head_setup_commands=["h"]))
    assert config["max_workers"] == 2
    assert config["upscaling_speed"] == 1.0
    assert config["idle_timeout_minutes"] == 5
    assert config["auth"] == {}
    assert config["file_mounts"] == {} and config["rsync_exclude"] == []
    # setup_commands run first on every node
    assert config["head_setup_commands"] == ["echo common", "h"]
    assert config["worker_setup_commands"] == ["echo common"]
    types = config["available_node_types"]
    assert (types["head"]["min_workers"], types["head"]["max_workers"]) == (0, 0)
    assert (types["worker"]["min_workers"], types["worker"]["max_workers"]) == (0, 2)
    # fake_multinode starts its own processes: no start commands
    assert config["worker_start_ember_commands"] == []


def test_rays_spelling_of_start_commands_is_accepted_and_kept_as_embers() -> None:
    config = prepare_config(
        _minimal(
            provider={"type": "local", "head_ip": "h", "worker_ips": []},
            worker_start_ray_commands=["ember start --address=h:6379"],
        )
    )
    assert config["worker_start_ember_commands"] == ["ember start --address=h:6379"]
    assert "worker_start_ray_commands" not in config
    # the other one keeps its default
    assert config["head_start_ember_commands"] == ["ember stop", "ember start --head --port=6379"]


def test_both_spellings_at_once_is_an_error() -> None:
    config = _minimal(head_start_ray_commands=["a"], head_start_ember_commands=["b"])
    assert _problems(config) == [
        (
            "head_start_ember_commands",
            "given twice, also as Ray's 'head_start_ray_commands': keep one",
        )
    ]


def test_a_bad_config_names_every_field_and_what_is_wrong() -> None:
    config = _minimal(max_worker=3, upscaling_speed="fast")
    config["available_node_types"]["worker"] = {
        "resources": {"CPU": -1, "GPU": 1.5},
        "min_worker": 1,
    }
    assert _problems(config) == [
        ("available_node_types.worker.min_worker", "unknown field; did you mean 'min_workers'?"),
        ("available_node_types.worker.node_config", "is required"),
        ("available_node_types.worker.resources.CPU", "-1 is less than the minimum of 0"),
        ("available_node_types.worker.resources.GPU", "1.5 is not of type 'integer'"),
        ("max_worker", "unknown field; did you mean 'max_workers'?"),
        ("upscaling_speed", "'fast' is not of type 'number'"),
    ]


def test_rules_across_fields() -> None:
    config = _minimal(head_node_type="boss", max_workers=1)
    config["available_node_types"]["worker"].update(min_workers=3, max_workers=2)
    assert _problems(config) == [
        ("head_node_type", "'boss' is not one of available_node_types: head, worker"),
        ("available_node_types.worker.min_workers", "3 is more than its max_workers (2)"),
        ("max_workers", "1 is less than the node types' min_workers summed (3)"),
    ]


def test_provider_type_and_external_module_are_checked() -> None:
    assert _problems(_minimal(provider={"type": "aws"})) == [
        (
            "provider.type",
            "unknown provider 'aws'; one of: fake_multinode, local, slurm, external, kubernetes",
        )
    ]
    assert _problems(_minimal(provider={"type": "external", "module": "nodot"})) == [
        ("provider.module", "an external provider needs module: package.ProviderClass")
    ]
    prepare_config(_minimal(provider={"type": "external", "module": "my_pkg.MyProvider"}))


def test_required_fields() -> None:
    assert _problems({"provider": {}}) == [
        ("cluster_name", "is required"),
        ("provider.type", "is required"),
    ]
    config = _minimal()
    del config["available_node_types"], config["head_node_type"]
    assert [p for p, _ in _problems(config)] == ["available_node_types", "head_node_type"]


def test_the_input_is_not_changed() -> None:
    config = _minimal(setup_commands=["x"])
    before = json.dumps(config, sort_keys=True)
    prepare_config(config)
    assert json.dumps(config, sort_keys=True) == before


def test_file_problems_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("cluster_name: x\nprovider: {type: local\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert str(bad) in str(info.value) and "not valid YAML: line 3" in str(info.value)
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="must be a mapping of fields; it is a list"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read the file: No such file"):
        load_config(tmp_path / "missing.yaml")
    assert str(Problem("", "x")) == "(top level): x"


_RAY_PREPARE = """
import json, sys
from ray.autoscaler._private.util import fillout_defaults, merge_setup_commands, \\
    fill_node_type_min_max_workers, validate_config
config = json.load(sys.stdin)
filled = fillout_defaults(config)
merge_setup_commands(filled)
fill_node_type_min_max_workers(filled)
validate_config(filled)
print(json.dumps(filled))
"""


def test_defaults_match_ray_2_60() -> None:
    # Ray's own steps on the same file (as an aws config: its defaults.yaml ships with Ray,
    # is read with no cloud call, and holds the defaults common to every provider; its
    # auth.ssh_user: ubuntu is the AWS image's user, not a common default).
    ray_python = require_ray_python()
    raw = yaml.safe_load((EXAMPLES / "fake.yaml").read_text())
    raw["setup_commands"] = ["echo common"]
    raw["worker_setup_commands"] = ["echo w"]
    raw["head_setup_commands"] = ["echo h"]  # AWS's default installs boto3: not common
    del raw["max_workers"], raw["idle_timeout_minutes"], raw["upscaling_speed"]
    del raw["available_node_types"]["cpu_worker"]["max_workers"]
    ray_raw = dict(raw, provider={"type": "aws", "region": "us-west-2"})
    out = subprocess.run(
        [str(ray_python), "-c", _RAY_PREPARE],
        input=json.dumps(ray_raw),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    theirs = json.loads(out.stdout)
    ours = prepare_config(raw)
    for field in (
        "max_workers",
        "upscaling_speed",
        "idle_timeout_minutes",
        "head_setup_commands",
        "worker_setup_commands",
        "file_mounts",
        "initialization_commands",
        "available_node_types",
        "head_node_type",
    ):
        assert ours[field] == theirs[field], field


def test_the_monitor_refuses_a_bad_config_before_it_starts(tmp_path: Path) -> None:
    import sys

    bad = tmp_path / "cluster.yaml"
    bad.write_text("cluster_name: x\nprovider: {type: fake_multinode}\nidle_timeout_minutes: -1\n")
    done = subprocess.run(
        [sys.executable, "-m", "ember.autoscaler.monitor", "--config", str(bad)]
        + ["--address", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "idle_timeout_minutes: -1 is less than the minimum of 0" in done.stderr
