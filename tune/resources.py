"""What a trial needs: ``PlacementGroupFactory`` (its bundles), ``with_resources`` and
``with_parameters`` (wrap a trainable without changing its code)."""

from __future__ import annotations

import functools
import inspect
from typing import Any

ATTR_RESOURCES = "_ember_tune_resources"


class PlacementGroupFactory:
    """Bundles for one trial: the first is the trainable's own; more are for the work it
    starts (reserved with it, so a trial never waits on the cluster halfway through)."""

    def __init__(self, bundles: list[dict[str, float]], strategy: str = "PACK") -> None:
        if not isinstance(bundles, list) or not bundles:
            raise ValueError("PlacementGroupFactory needs a non-empty list of resource dicts")
        clean = []
        for i, bundle in enumerate(bundles):
            if not isinstance(bundle, dict):
                raise ValueError(f"bundle {i} must be a dict of resources, got {bundle!r}")
            for k, v in bundle.items():
                if not isinstance(v, int | float) or v < 0:
                    raise ValueError(f"bundle {i}: resource {k!r} must be a number >= 0, got {v!r}")
            clean.append({k: float(v) for k, v in bundle.items() if v > 0})
        if not any(clean):
            raise ValueError("a trial must need some resource (all bundles are empty)")
        self.bundles = clean
        self.strategy = strategy

    @property
    def head_bundle(self) -> dict[str, float]:
        return self.bundles[0]

    def required_resources(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for bundle in self.bundles:
            for k, v in bundle.items():
                total[k] = total.get(k, 0.0) + v
        return total

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PlacementGroupFactory)
            and other.bundles == self.bundles
            and other.strategy == self.strategy
        )

    def __repr__(self) -> str:
        return f"PlacementGroupFactory({self.bundles}, strategy={self.strategy!r})"


def as_resources(spec: Any) -> PlacementGroupFactory:
    """``resources_per_trial`` in any spelling Ray takes: a factory, or a dict with cpu/gpu
    keys (and custom resources)."""
    if spec is None:
        return PlacementGroupFactory([{"CPU": 1}])
    if isinstance(spec, PlacementGroupFactory):
        return spec
    if isinstance(spec, dict):
        spec = dict(spec)
        bundle: dict[str, float] = {}
        for key, name in (("cpu", "CPU"), ("gpu", "GPU"), ("memory", "memory")):
            if key in spec:
                bundle[name] = spec.pop(key)
        extra_cpu = spec.pop("extra_cpu", 0)
        extra_gpu = spec.pop("extra_gpu", 0)
        custom = spec.pop("custom_resources", None) or {}
        for k in list(spec):
            if k[:1].isupper():
                bundle[k] = spec.pop(k)
        if spec:
            raise ValueError(
                f"resources_per_trial has unknown keys {sorted(spec)}; use cpu, gpu, memory, "
                "custom_resources or resource names"
            )
        bundle.update(custom)
        bundles = [bundle or {"CPU": 0}]
        if extra_cpu or extra_gpu:
            bundles.append({"CPU": extra_cpu, "GPU": extra_gpu})
        return PlacementGroupFactory(bundles)
    raise ValueError(
        f"resources must be a dict or a PlacementGroupFactory, got {type(spec).__name__}"
    )


def with_resources(trainable: Any, resources: Any) -> Any:
    """The trainable, marked with what each of its trials needs."""
    factory = (
        resources
        if callable(resources) and not isinstance(resources, PlacementGroupFactory | dict)
        else as_resources(resources)
    )
    if inspect.isclass(trainable):
        marked = type(trainable.__name__, (trainable,), {ATTR_RESOURCES: factory})
        marked.__module__ = trainable.__module__
        marked.__qualname__ = trainable.__qualname__
        return marked

    @functools.wraps(trainable)
    def marked_fn(*args: Any, **kwargs: Any) -> Any:
        return trainable(*args, **kwargs)

    setattr(marked_fn, ATTR_RESOURCES, factory)
    return marked_fn


def with_parameters(trainable: Any, **kwargs: Any) -> Any:
    """The trainable with large or unpicklable-per-trial objects passed once: each is put in
    the object store a single time and every trial gets it by reference."""
    import ember

    refs = {k: ember.put(v) for k, v in kwargs.items()}
    if inspect.isclass(trainable):
        base_setup = trainable.setup

        def setup(self: Any, config: dict, **extra: Any) -> Any:
            values = {k: ember.get(r) for k, r in refs.items()}
            return base_setup(self, config, **values, **extra)

        wrapped = type(trainable.__name__, (trainable,), {"setup": setup})
        wrapped.__module__ = trainable.__module__
        wrapped.__qualname__ = trainable.__qualname__
        return wrapped

    @functools.wraps(trainable)
    def inner(config: dict, *args: Any) -> Any:
        values = {k: ember.get(r) for k, r in refs.items()}
        return trainable(config, *args, **values)

    # The wrapper takes config (and a reporter, maybe) but not the parameters themselves.
    inner.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("config", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    )
    if hasattr(trainable, ATTR_RESOURCES):
        setattr(inner, ATTR_RESOURCES, getattr(trainable, ATTR_RESOURCES))
    return inner
