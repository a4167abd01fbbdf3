"""Checking ``@ember.remote(...)`` and ``.options(...)`` arguments, and turning them into
resource shapes. Unknown or negative options fail at decoration time, naming the option.
"""

from __future__ import annotations

from typing import Any

from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy

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
    "shared_process",
    "_metadata",
}

# A driver that names no namespace gets its own, "anonymous-<pid>", as in modern Ray. Detached
# actors made from one keep Ray 0.8's global names ("a globally unique name ... accessed
# across different drivers"): the GCS finds them from any other anonymous namespace.
ANONYMOUS_NAMESPACE_PREFIX = "anonymous-"

# Allowed in ``@ember.remote(...)`` only; Ray refuses them in ``.options()``: how many calls a
# worker runs and an actor's concurrency groups are fixed with the function or class.
DECORATOR_ONLY_OPTIONS = frozenset({"max_calls", "concurrency_groups"})

# Ray's resource unit: quantities are whole multiples of 1/10000 there, so a nonzero amount
# below 0.0001 would round to nothing (the task would hold none of the resource).
RESOURCE_UNIT_SCALING = 10_000
_QUANTITY_OPTIONS = ("num_cpus", "num_gpus", "memory")

METHOD_OPTIONS = {
    "num_returns",
    "num_return_vals",
    "max_task_retries",
    "retry_exceptions",
    "name",
    "concurrency_group",
}


class InvalidOptionTypeError(TypeError, ValueError):
    """An option of the wrong type. Ray raises TypeError here and Ember's rule for bad options
    is ValueError: this is both, so either ``except`` catches it."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_exception_list(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(
        isinstance(e, type) and issubclass(e, BaseException) for e in value
    )


def _is_strategy(value: Any) -> bool:
    if isinstance(value, str):
        return value in ("DEFAULT", "SPREAD")
    return value is None or callable(getattr(value, "to_wire", None))


_GPUS = "a non-negative number, a fraction only up to 1 (above 1, a whole number of GPUs)"

# {option: (type check, value check or None, what is allowed)}. The type check decides
# between a wrong type (InvalidOptionTypeError) and a wrong value (ValueError); None is always
# allowed and means "the default". Counts that Ray lets be -1 mean "forever / unlimited" there
# and here.
_RULES: dict[str, tuple[Any, Any, str]] = {
    "num_cpus": (_is_number, lambda v: v >= 0, "a non-negative number"),
    # Whole GPUs above 1 is checked when a task is submitted (resource_shape), as Ray does.
    "num_gpus": (_is_number, lambda v: v >= 0, _GPUS),
    "memory": (_is_number, lambda v: v >= 0, "a non-negative number of bytes"),
    "object_store_memory": (_is_number, lambda v: v >= 0, "a non-negative number of bytes"),
    # "streaming" and "dynamic" are a generator function's (checked with the function).
    "num_returns": (
        lambda v: _is_int(v) or isinstance(v, str),
        lambda v: v in ("streaming", "dynamic") if isinstance(v, str) else v >= 0,
        "an integer >= 0, or 'streaming' or 'dynamic' for a generator function",
    ),
    "max_calls": (_is_int, lambda v: v >= 0, "an integer >= 0 (0: no limit)"),
    "max_retries": (_is_int, lambda v: v >= -1, "an integer >= -1 (-1: retry forever)"),
    "max_restarts": (_is_int, lambda v: v >= -1, "an integer >= -1 (-1: restart forever)"),
    "max_task_retries": (_is_int, lambda v: v >= -1, "an integer >= -1 (-1: retry forever)"),
    "max_pending_calls": (_is_int, lambda v: v >= -1, "an integer >= -1 (-1: no limit)"),
    "max_concurrency": (_is_int, lambda v: v >= 1, "an integer >= 1"),
    "retry_exceptions": (
        lambda v: isinstance(v, bool | list | tuple),
        lambda v: isinstance(v, bool) or _is_exception_list(v),
        "True, False, or a list or tuple of exception classes",
    ),
    "name": (lambda v: isinstance(v, str), None, "a string"),
    "namespace": (lambda v: isinstance(v, str), None, "a string"),
    "lifetime": (
        lambda v: isinstance(v, str),
        lambda v: v in ("detached", "non_detached"),
        "None, 'detached' or 'non_detached'",
    ),
    "detached": (lambda v: isinstance(v, bool), None, "True or False"),
    "get_if_exists": (lambda v: isinstance(v, bool), None, "True or False"),
    "resources": (lambda v: isinstance(v, dict), None, "a dict of resource name to amount"),
    "accelerator_type": (lambda v: isinstance(v, str), None, "a string"),
    "runtime_env": (lambda v: isinstance(v, dict), None, "a dict"),
    "_metadata": (lambda v: isinstance(v, dict), None, "a dict"),
    "scheduling_strategy": (
        lambda v: True,
        _is_strategy,
        "None, 'DEFAULT', 'SPREAD' or a scheduling strategy object",
    ),
    "placement_group_bundle_index": (_is_int, lambda v: v >= -1, "an integer >= -1"),
    "placement_group_capture_child_tasks": (
        lambda v: isinstance(v, bool),
        None,
        "True or False",
    ),
    "concurrency_groups": (lambda v: isinstance(v, dict | list), None, "a dict or list"),
    "shared_process": (lambda v: isinstance(v, bool), None, "True or False"),
    "concurrency_group": (lambda v: isinstance(v, str), None, "a string"),
}


def _bad(key: str, value: Any, what: str, allowed: str, wrong_type: bool) -> ValueError:
    cls = InvalidOptionTypeError if wrong_type else ValueError
    got = f"{value!r} (a {type(value).__name__})" if wrong_type else repr(value)
    return cls(f"Invalid value for option {key!r} of {what}: got {got}; allowed: {allowed}.")


def _check(key: str, value: Any, what: str) -> None:
    rule = _RULES.get(key)
    if rule is None or value is None:
        return
    type_ok, value_ok, allowed = rule
    if not type_ok(value):
        raise _bad(key, value, what, allowed, wrong_type=True)
    if value_ok is not None and not value_ok(value):
        raise _bad(key, value, what, allowed, wrong_type=False)


def _check_precision(resource: str, amount: Any, what: str) -> None:
    """Ray's rule: a fractional quantity is at least 0.0001 (0 itself is allowed)."""
    if isinstance(amount, float) and amount != 0 and int(amount * RESOURCE_UNIT_SCALING) == 0:
        raise ValueError(
            f"The precision of the fractional quantity of resource {resource} cannot go "
            f"beyond 0.0001: got {amount!r} for {what}; use 0 or at least 0.0001."
        )


def validate(
    options: dict[str, Any], allowed: set[str], what: str, *, in_options: bool = False
) -> dict[str, Any]:
    """Returns the options with old spellings mapped to new ones; ValueError on bad ones.

    Each error names the option, the value given and what is allowed. A value of the wrong
    type raises InvalidOptionTypeError, which is both a ValueError and a TypeError.
    ``in_options``: the options come from ``.options()``, where ``DECORATOR_ONLY_OPTIONS``
    are refused.
    """
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(
            f"Invalid option {unknown[0]!r} for {what}. Valid options are: "
            f"{', '.join(sorted(k for k in allowed if not k.startswith('_')))}."
        )
    for key, value in options.items():
        # The old spellings follow the rules of what they stand for.
        _check(
            {"num_return_vals": "num_returns", "max_reconstructions": "max_restarts"}.get(key, key),
            value,
            what,
        )
        if key in _QUANTITY_OPTIONS:
            _check_precision(key, value, what)
    # After the values' checks, as Ray does: a bad value is named as such first.
    refused = sorted(DECORATOR_ONLY_OPTIONS & set(options)) if in_options else []
    if refused:
        raise ValueError(
            f"Setting {refused[0]!r} is not supported in '.options()'. Set it where {what} "
            f"is declared instead: @ember.remote({refused[0]}=...)."
        )
    opts = dict(options)
    if opts.get("runtime_env") is not None:
        from ember import runtime_env

        opts["runtime_env"] = runtime_env.validate(opts["runtime_env"], what)
    if "num_return_vals" in opts:
        opts.setdefault("num_returns", opts.pop("num_return_vals"))
    if "max_reconstructions" in opts:
        opts.setdefault("max_restarts", opts.pop("max_reconstructions"))
    if opts.pop("detached", False):
        # Ray 0.8's detached actors had to be named: keep that rule for the
        # old spelling; lifetime="detached" allows unnamed ones, as modern Ray does.
        if not opts.get("name"):
            raise ValueError("Detached actors must be named: pass name=... with detached=True.")
        opts["lifetime"] = "detached"
    if opts.get("get_if_exists") and not opts.get("name"):
        raise ValueError(f"get_if_exists=True for {what} needs a name: pass name=... as well.")
    for name, amount in (opts.get("resources") or {}).items():
        if name in ("CPU", "GPU", "memory"):
            raise ValueError(
                f"Use num_cpus / num_gpus / memory instead of resources={{'{name}': ...}} "
                f"for {what}."
            )
        if not isinstance(name, str) or not _is_number(amount) or amount < 0:
            raise ValueError(
                f"Invalid value for option 'resources' of {what}: got {{{name!r}: {amount!r}}}; "
                f"allowed: resource names (strings) mapped to non-negative numbers."
            )
        _check_precision(name, amount, what)
    return opts


class OlderRemoteSpelling:
    """Ray's ``_remote(args=..., kwargs=..., **options)``, kept by its tests and older
    programs: ``.remote`` with the call's arguments passed by name and any options beside
    them. For remote functions, actor classes and actor methods alike (each has ``options``
    and ``remote``)."""

    def _remote(
        self, args: Any = None, kwargs: dict[str, Any] | None = None, **options: Any
    ) -> Any:
        target = self.options(**options) if options else self  # type: ignore[attr-defined]
        return target.remote(*(args or ()), **(kwargs or {}))


def check_init_joining(address: str | None, init_kwargs: dict[str, Any]) -> None:
    """``ember.init(address=...)`` joins a running cluster, whose processes are already
    configured: Ray refuses a ``_system_config`` there rather than ignore it, and so does
    this. ``address`` is the one init will join (given, or from EMBER_ADDRESS/RAY_ADDRESS);
    ``init_kwargs`` are init's extra keyword arguments."""
    if address and init_kwargs.get("_system_config"):
        raise ValueError(
            "When connecting to an existing cluster, _system_config must not be provided "
            f"(address={address!r}): a running cluster keeps the configuration its nodes "
            "started with. Drop _system_config from ember.init()."
        )


def check_shared_process(opts: dict[str, Any], what: str) -> None:
    """``shared_process=True``: the actor lives in a process it shares with others of its
    job, so what would be the process's for it alone is refused here, at the call."""
    if not opts.get("shared_process"):
        return
    how = "drop shared_process=True to give the actor a process of its own"
    cpus = opts.get("num_cpus")
    if cpus is not None and cpus >= 1:
        raise ValueError(
            f"{what}: a shared_process actor takes num_cpus=0 (the default) or a fraction "
            f"below 1, not {cpus!r}; a whole CPU is a process's to use: {how}."
        )
    if opts.get("num_gpus"):
        raise ValueError(
            f"{what}: a shared_process actor cannot hold GPUs (CUDA_VISIBLE_DEVICES is the "
            f"process's, shared by every actor in it): {how}."
        )
    if opts.get("runtime_env"):
        raise ValueError(
            f"{what}: a shared_process actor cannot have a runtime_env of its own (the "
            f"environment is the process's, shared by every actor in it): {how}, or set "
            f"the runtime_env on the job (ember.init(runtime_env=...))."
        )
    if opts.get("concurrency_groups"):
        raise ValueError(
            f"{what}: a shared_process actor has one mailbox (max_concurrency bounds it); "
            f"concurrency groups need threads or event loops of their own: {how}."
        )


def resource_shape(opts: dict[str, Any], default_cpus: float) -> dict[str, float]:
    """The resources a task or actor holds while it runs."""
    shape: dict[str, float] = {}
    cpus = opts.get("num_cpus")
    cpus = default_cpus if cpus is None else cpus
    if cpus:
        shape["CPU"] = float(cpus)
    gpus = opts.get("num_gpus")
    if gpus:
        # A fraction of one GPU or whole GPUs: 1.5 could never be placed. Ray lets it be
        # declared and refuses it here, at .remote().
        if gpus > 1 and not float(gpus).is_integer():
            raise _bad("num_gpus", gpus, "this task or actor", _GPUS, wrong_type=False)
        shape["GPU"] = float(gpus)
    if opts.get("memory"):
        shape["memory"] = float(opts["memory"])
    for name, amount in (opts.get("resources") or {}).items():
        if amount:
            shape[name] = float(amount)
    return shape


def scheduling_strategy(opts: dict[str, Any]) -> Any:
    """The strategy as it travels to the raylet: None, "SPREAD" or a tuple. A
    ``placement_group`` option stands for a PlacementGroupSchedulingStrategy."""
    strategy = opts.get("scheduling_strategy")
    if opts.get("placement_group") not in (None, "default"):
        strategy = PlacementGroupSchedulingStrategy(
            opts["placement_group"],
            opts.get("placement_group_bundle_index", -1),
            opts.get("placement_group_capture_child_tasks"),
        )
    if strategy is None or isinstance(strategy, str):
        return None if strategy in (None, "DEFAULT") else strategy
    to_wire = getattr(strategy, "to_wire", None)
    if to_wire is None:
        raise ValueError(f"unknown scheduling_strategy {strategy!r}")
    return to_wire()
