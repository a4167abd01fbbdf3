"""The cluster config's JSON Schema: Ray's ``cluster.yaml`` fields (its ``ray-schema.json``),
with Ember's own spellings of the start commands beside Ray's.

Kept as a Python value, not a data file, so it ships with the package without package-data
rules and a reader sees every field in one place. Where Ray's schema is loose and a wrong
value could only fail later, on a machine (a negative ``min_workers``), this one is stricter.
"""

from __future__ import annotations

from typing import Any

# Every start/setup command list: shell lines run on a node, in order.
_COMMANDS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}

# Ray's name -> Ember's spelling. Either may be written; ``prepare_config`` keeps Ember's.
START_COMMAND_ALIASES = {
    "head_start_ray_commands": "head_start_ember_commands",
    "worker_start_ray_commands": "worker_start_ember_commands",
}

COMMAND_FIELDS = (
    "initialization_commands",
    "setup_commands",
    "head_setup_commands",
    "worker_setup_commands",
    *START_COMMAND_ALIASES,
    *START_COMMAND_ALIASES.values(),
)

_NODE_TYPE: dict[str, Any] = {
    "type": "object",
    "required": ["resources", "node_config"],
    "additionalProperties": False,
    "properties": {
        # Provider-specific: a Slurm partition, an SSH host... read by the provider only.
        "node_config": {"type": "object"},
        "min_workers": {"type": "integer", "minimum": 0},
        "max_workers": {"type": "integer", "minimum": 0},
        "idle_timeout_s": {"type": ["number", "null"], "minimum": 0},
        "priority": {"type": "integer"},
        # What a node of this type offers the scheduler. Integers, as Ray's schema says:
        # the autoscaler plans whole nodes, and fractional capacity is a node's own business.
        "resources": {
            "type": "object",
            "additionalProperties": {"type": "integer", "minimum": 0},
        },
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "initialization_commands": _COMMANDS,
        "worker_setup_commands": _COMMANDS,
        "docker": {"type": "object"},
    },
}

CLUSTER_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Ember cluster config (Ray's cluster.yaml)",
    "type": "object",
    "required": ["cluster_name", "provider"],
    "additionalProperties": False,
    "properties": {
        "cluster_name": {"type": "string", "minLength": 1},
        "max_workers": {"type": "integer", "minimum": 0},
        "upscaling_speed": {"type": "number", "minimum": 0},
        "idle_timeout_minutes": {"type": "number", "minimum": 0},
        "provider": {
            "type": "object",
            "required": ["type"],
            # Providers read their own fields (head_ip, worker_ips, module, partition...).
            "additionalProperties": True,
            "properties": {
                "type": {"type": "string", "minLength": 1},
                "module": {"type": "string"},
                "head_ip": {"type": "string"},
                "worker_ips": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                "use_internal_ips": {"type": "boolean"},
                "namespace": {"type": "string"},
                # Ember's fields of the local and slurm providers (docs/deploying.md).
                "gcs_address": {"type": "string", "pattern": "^\\S+:[0-9]+$"},
                "gcs_port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "ember_command": {
                    "oneOf": [
                        {"type": "string", "minLength": 1},
                        {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    ]
                },
                "node_temp_dir": {"type": "string", "minLength": 1},
                "ssh_port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "known_hosts": {"type": "string"},
                "state_path": {"type": "string"},
                "state_dir": {"type": "string"},
            },
            # What each provider cannot start without, named before anything starts.
            "allOf": [
                {
                    "if": {"required": ["type"], "properties": {"type": {"const": "local"}}},
                    # An empty worker_ips is Ray's head-only cluster: allowed.
                    "then": {"required": ["head_ip", "worker_ips"]},
                },
                {
                    "if": {"required": ["type"], "properties": {"type": {"const": "slurm"}}},
                    "then": {"required": ["gcs_address"]},
                },
            ],
        },
        "auth": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "ssh_user": {"type": "string"},
                "ssh_public_key": {"type": "string"},
                "ssh_private_key": {"type": "string"},
                "ssh_proxy_command": {"type": "string"},
                "ssh_proxy_use_node_id": {"type": "boolean"},
            },
        },
        "docker": {"type": "object"},
        "head_node_type": {"type": "string", "minLength": 1},
        "available_node_types": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": _NODE_TYPE,
        },
        # remote path -> local path
        "file_mounts": {"type": "object", "additionalProperties": {"type": "string"}},
        "cluster_synced_files": {"type": "array", "items": {"type": "string"}},
        "file_mounts_sync_continuously": {"type": "boolean"},
        "rsync_exclude": {"type": "array", "items": {"type": "string"}},
        "rsync_filter": {"type": "array", "items": {"type": "string"}},
        "metadata": {"type": "object"},
        "no_restart": {"type": "boolean"},
        **{name: _COMMANDS for name in COMMAND_FIELDS},
    },
}
