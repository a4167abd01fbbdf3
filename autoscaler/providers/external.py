"""``provider: {type: external, module: package.ProviderClass}``: a node provider of the
user's own, imported by its dotted path and checked before the autoscaler uses it. A class
written for Ray (``ray.autoscaler.node_provider.NodeProvider``) works when it has the same
methods: the check is on the interface, not the base class."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from ember.autoscaler.node_provider import NodeProvider

# What the autoscaler calls; the rest of NodeProvider has defaults.
REQUIRED_METHODS = (
    "non_terminated_nodes",
    "node_tags",
    "set_node_tags",
    "internal_ip",
    "create_node",
    "terminate_node",
)


class ExternalProviderError(ValueError):
    """provider.module names something that is not a usable node provider."""


def load_provider_class(dotted: str) -> type:
    """The class ``package.module.Class`` names, checked; ExternalProviderError says why not."""
    module_name, _, class_name = str(dotted).rpartition(".")
    if not module_name or not class_name:
        raise ExternalProviderError(
            f"provider.module {dotted!r}: expected package.ProviderClass (a module path and a "
            "class name)"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # any error while importing the user's module is theirs to see
        raise ExternalProviderError(
            f"provider.module {dotted!r}: cannot import {module_name!r}: "
            f"{type(e).__name__}: {e} (is it installed, or on PYTHONPATH, where the autoscaler "
            "runs?)"
        ) from e
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ExternalProviderError(
            f"provider.module {dotted!r}: module {module_name!r} has no {class_name!r}"
        )
    if not inspect.isclass(cls):
        raise ExternalProviderError(
            f"provider.module {dotted!r}: is a {type(cls).__name__}, not a class"
        )
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(cls, m, None))]
    missing += sorted(set(getattr(cls, "__abstractmethods__", ())) - set(missing))
    if missing:
        raise ExternalProviderError(
            f"provider.module {dotted!r} does not implement the NodeProvider interface "
            f"(ember.autoscaler.node_provider): missing or abstract {', '.join(missing)}"
        )
    return cls


def load_external_provider(provider_config: Mapping[str, Any], cluster_name: str) -> Any:
    """An instance of ``provider.module``'s class, made as every provider is:
    ``Class(provider_config, cluster_name)``."""
    cls = load_provider_class(str(provider_config.get("module", "")))
    try:
        return cls(dict(provider_config), cluster_name)
    except Exception as e:
        raise ExternalProviderError(
            f"provider.module {provider_config.get('module')!r}: the provider failed to start: "
            f"{type(e).__name__}: {e}"
        ) from e


__all__ = ["ExternalProviderError", "NodeProvider", "load_external_provider", "load_provider_class"]
