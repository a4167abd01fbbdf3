"""Reading a cluster config: parse, check against the schema, fill Ray's defaults, check the
rules a schema cannot say. A bad file fails here, before any node starts, with every problem
named by its field's path (``available_node_types.worker.resources.CPU``).

Defaults are filled as Ray's ``prepare_config`` fills them: the provider's defaults under the
user's top-level fields (a shallow merge: a user's ``available_node_types`` replaces the
defaults' whole), ``auth`` at least ``{}``, ``setup_commands`` prepended to the head's and the
workers' setup commands, each node type's ``min_workers`` 0 and ``max_workers`` the global
``max_workers`` (0 for the head's type). Unlike Ray, Ember has no built-in machine images to
default node types from, so ``available_node_types`` and ``head_node_type`` are required.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
from dataclasses import dataclass
from typing import Any

import jsonschema
import yaml
from ember.autoscaler.schema import CLUSTER_SCHEMA, START_COMMAND_ALIASES

# The providers a config may name. Only the names are checked here; each provider's own
# module reads its fields. ``external`` loads ``provider.module`` (``package.Class``).
PROVIDER_TYPES = ("fake_multinode", "local", "slurm", "external", "kubernetes")

# Ray's defaults.yaml fields common to its providers, with Ember's start commands.
_DEFAULTS: dict[str, Any] = {
    "cluster_name": "default",
    "max_workers": 2,
    "upscaling_speed": 1.0,
    "idle_timeout_minutes": 5,
    "docker": {},
    "file_mounts": {},
    "cluster_synced_files": [],
    "file_mounts_sync_continuously": False,
    "rsync_exclude": [],
    "rsync_filter": [],
    "initialization_commands": [],
    "setup_commands": [],
    "head_setup_commands": [],
    "worker_setup_commands": [],
    "head_start_ember_commands": ["ember stop", "ember start --head --port=6379"],
    "worker_start_ember_commands": ["ember stop", "ember start --address=$EMBER_HEAD_IP:6379"],
}

# fake_multinode starts its nodes itself, as local processes: no commands to run (Ray's
# fake_multi_node/example.yaml leaves them empty too).
_PROVIDER_DEFAULTS: dict[str, dict[str, Any]] = {
    "fake_multinode": {"head_start_ember_commands": [], "worker_start_ember_commands": []},
}

_VALIDATOR = jsonschema.Draft202012Validator(CLUSTER_SCHEMA)
_MODULE_CLASS = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config: where (a dotted path, ``""`` for the top) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '(top level)'}: {self.message}"


class ConfigError(ValueError):
    """A cluster config that cannot be used; ``problems`` lists every field at fault."""

    def __init__(self, problems: list[Problem], source: str = "cluster config") -> None:
        self.problems = problems
        self.source = source
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{source} is not valid ({len(problems)} problem(s)):\n{lines}")


def _dotted(parts: Any) -> str:
    return ".".join(str(p) for p in parts)


def _schema_problems(config: Any) -> list[Problem]:
    found = []
    for err in _VALIDATOR.iter_errors(config):
        path = list(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            # Name the unknown field itself, and the one the user probably meant.
            known = list(err.schema.get("properties", {}))
            for extra in sorted(set(err.instance) - set(known)):
                hint = difflib.get_close_matches(str(extra), known, n=1)
                why = f"did you mean {hint[0]!r}?" if hint else f"known fields: {', '.join(known)}"
                found.append(Problem(_dotted([*path, extra]), f"unknown field; {why}"))
        elif err.validator == "required":
            missing = re.match(r"'([^']+)'", err.message)
            name = missing.group(1) if missing else "?"
            found.append(Problem(_dotted([*path, name]), "is required"))
        else:
            found.append(Problem(_dotted(path), err.message))
    return sorted(set(found), key=lambda p: (p.path, p.message))


def _alias_problems(config: dict[str, Any]) -> list[Problem]:
    return [
        Problem(ember, f"given twice, also as Ray's {ray!r}: keep one")
        for ray, ember in START_COMMAND_ALIASES.items()
        if ray in config and ember in config
    ]


def _rule_problems(config: dict[str, Any]) -> list[Problem]:
    """What the schema cannot say: fields that must agree with each other."""
    found = []
    provider = config["provider"]
    if provider["type"] not in PROVIDER_TYPES:
        found.append(
            Problem(
                "provider.type",
                f"unknown provider {provider['type']!r}; one of: {', '.join(PROVIDER_TYPES)}",
            )
        )
    if provider["type"] == "external" and not _MODULE_CLASS.match(provider.get("module", "")):
        found.append(
            Problem("provider.module", "an external provider needs module: package.ProviderClass")
        )
    types = config["available_node_types"]
    if config["head_node_type"] not in types:
        found.append(
            Problem(
                "head_node_type",
                f"{config['head_node_type']!r} is not one of available_node_types: "
                f"{', '.join(types)}",
            )
        )
    for name, node_type in types.items():
        if node_type["min_workers"] > node_type["max_workers"]:
            found.append(
                Problem(
                    f"available_node_types.{name}.min_workers",
                    f"{node_type['min_workers']} is more than its max_workers "
                    f"({node_type['max_workers']})",
                )
            )
    total_min = sum(t["min_workers"] for t in types.values())
    if total_min > config["max_workers"]:
        found.append(
            Problem(
                "max_workers",
                f"{config['max_workers']} is less than the node types' min_workers summed "
                f"({total_min})",
            )
        )
    return found


def fill_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """A new config: Ray's defaults filled in (see the module's docstring). Expects a config
    that passed the schema; the input is not changed."""
    merged = copy.deepcopy(_DEFAULTS)
    merged.update(copy.deepcopy(_PROVIDER_DEFAULTS.get(config["provider"]["type"], {})))
    for ray, ember in START_COMMAND_ALIASES.items():
        if ray in config:
            merged.pop(ember, None)
    merged.update(copy.deepcopy(config))
    for ray, ember in START_COMMAND_ALIASES.items():
        if ray in merged:
            merged[ember] = merged.pop(ray)
    merged.setdefault("auth", {})
    merged["head_setup_commands"] = merged["setup_commands"] + merged["head_setup_commands"]
    merged["worker_setup_commands"] = merged["setup_commands"] + merged["worker_setup_commands"]
    for name, node_type in merged.get("available_node_types", {}).items():
        node_type.setdefault("min_workers", 0)
        head = name == merged.get("head_node_type")
        node_type.setdefault("max_workers", 0 if head else merged["max_workers"])
    return merged


def prepare_config(config: Any, source: str = "cluster config") -> dict[str, Any]:
    """A raw config (as parsed from YAML) checked and with defaults filled, or ConfigError
    naming every problem. Prepare a raw config once: setup commands are merged in."""
    problems = _schema_problems(config)
    if problems:
        raise ConfigError(problems, source)
    problems = _alias_problems(config)
    for required in ("available_node_types", "head_node_type"):
        if required not in config:
            problems.append(Problem(required, "is required (Ember has no default node types)"))
    if problems:
        raise ConfigError(problems, source)
    prepared = fill_defaults(config)
    problems = _rule_problems(prepared)
    if problems:
        raise ConfigError(problems, source)
    return prepared


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read, check and fill a cluster.yaml; ConfigError names the file and every problem."""
    source = os.fspath(path)
    try:
        with open(source) as f:
            raw = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError([Problem("", f"cannot read the file: {e.strerror}")], source) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = getattr(e, "problem", None) or str(e)
        raise ConfigError([Problem("", f"not valid YAML: {where}{what}")], source) from e
    if not isinstance(raw, dict):
        kind = "empty" if raw is None else f"a {type(raw).__name__}"
        raise ConfigError(
            [Problem("", f"the file must be a mapping of fields; it is {kind}")], source
        )
    return prepare_config(raw, source)
