"""Checking ``@ember.remote(...)`` and ``.options(...)`` arguments, and turning them into
resource shapes. Unknown or negative options fail at decoration time, naming the option.
"""

from __future__ import annotations

from typing import Any

TASK_OPTIONS = {
    "num_returns",
    "num_return_vals",  # Ray 0.8 spelling
    "num_cpus",
    "num_gpus",
    "resources",
    "memory",
    "object_store_memory",
    "max_retries",
    "max_calls",
    "retry_exceptions",
    "name",
    "scheduling_strategy",
    "runtime_env",
    "placement_group",
    "placement_group_bundle_index",
    "placement_group_capture_child_tasks",
    "accelerator_type",
    "_metadata",
}

ACTOR_OPTIONS = {
    "num_cpus",
    "num_gpus",
    "resources",
    "memory",
    "object_store_memory",
    "max_restarts",
    "max_reconstructions",  # Ray 0.8 spelling
    "max_task_retries",
    "max_concurrency",
    "max_pending_calls",
    "name",
    "namespace",
    "lifetime",
    "detached",  # Ray 0.8 spelling of lifetime="detached"
    "get_if_exists",
    "scheduling_strategy",
    "runtime_env",
    "placement_group",
    "placement_group_bundle_index",
    "placement_group_capture_child_tasks",
    "accelerator_type",
    "concurrency_groups",
    "_metadata",
}

METHOD_OPTIONS = {"num_returns", "num_return_vals", "max_task_retries", "name", "concurrency_group"}

_NON_NEGATIVE = (
    "num_cpus",
    "num_gpus",
    "memory",
    "object_store_memory",
    "max_calls",
    "max_concurrency",
    "num_returns",
)


def validate(options: dict[str, Any], allowed: set[str], what: str) -> dict[str, Any]:
    """Returns the options with old spellings mapped to new ones; ValueError on bad ones."""
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(
            f"Invalid option {unknown[0]!r} for {what}. Valid options are: "
            f"{', '.join(sorted(k for k in allowed if not k.startswith('_')))}."
        )
    opts = dict(options)
    if "num_return_vals" in opts:
        opts.setdefault("num_returns", opts.pop("num_return_vals"))
    if "max_reconstructions" in opts:
        opts.setdefault("max_restarts", opts.pop("max_reconstructions"))
    if opts.pop("detached", False):
        # Ray 0.8's detached actors had to be named (002 §5.3.8): keep that rule for the
        # old spelling; lifetime="detached" allows unnamed ones, as modern Ray does.
        if not opts.get("name"):
            raise ValueError("Detached actors must be named: pass name=... with detached=True.")
        opts["lifetime"] = "detached"
    for key in _NON_NEGATIVE:
        value = opts.get(key)
        if value is None:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"{key} for {what} must be a number, got {value!r}")
        if value < 0:
            raise ValueError(f"{key} for {what} must be non-negative, got {value}")
    if "num_returns" in opts and not isinstance(opts["num_returns"], int):
        raise ValueError(f"num_returns for {what} must be an integer, got {opts['num_returns']!r}")
    for key in ("max_retries", "max_restarts", "max_task_retries"):
        value = opts.get(key)
        if value is not None and (not isinstance(value, int) or value < -1):
            raise ValueError(
                f"{key} for {what} must be an integer >= -1 (-1: forever), got {value!r}"
            )
    if opts.get("max_concurrency") is not None and opts["max_concurrency"] < 1:
        raise ValueError(f"max_concurrency for {what} must be at least 1")
    res = opts.get("resources")
    if res is not None:
        if not isinstance(res, dict):
            raise ValueError(f"resources for {what} must be a dict, got {type(res).__name__}")
        for name, amount in res.items():
            if name in ("CPU", "GPU", "memory"):
                raise ValueError(
                    f"Use num_cpus / num_gpus / memory instead of resources={{'{name}': ...}} "
                    f"for {what}."
                )
            if not isinstance(amount, int | float) or amount < 0:
                raise ValueError(f"resource {name!r} for {what} must be a non-negative number")
    lifetime = opts.get("lifetime")
    if lifetime not in (None, "detached", "non_detached"):
        raise ValueError(
            f"lifetime for {what} must be 'detached' or 'non_detached', got {lifetime!r}"
        )
    return opts


def resource_shape(opts: dict[str, Any], default_cpus: float) -> dict[str, float]:
    """The resources a task or actor holds while it runs."""
    shape: dict[str, float] = {}
    cpus = opts.get("num_cpus")
    cpus = default_cpus if cpus is None else cpus
    if cpus:
        shape["CPU"] = float(cpus)
    if opts.get("num_gpus"):
        shape["GPU"] = float(opts["num_gpus"])
    if opts.get("memory"):
        shape["memory"] = float(opts["memory"])
    for name, amount in (opts.get("resources") or {}).items():
        if amount:
            shape[name] = float(amount)
    return shape
