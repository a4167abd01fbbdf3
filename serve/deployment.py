"""``@serve.deployment``, ``.options()`` and ``.bind()``: declaring what to run.

A ``Deployment`` is a user function or class plus its settings; ``.bind(*args)`` makes an
``Application``, a node of the application graph whose arguments may be other bound
deployments. ``serve.run`` walks the graph; inside each replica a bound argument arrives as a
``DeploymentHandle`` to that deployment (Ray Serve's model composition).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ember.serve.config import ConfigError, DeploymentConfig, deployment_config

# The decorator's options that are not DeploymentConfig fields.
_OWN_OPTIONS = {"name", "version", "route_prefix"}


class Deployment:
    def __init__(self, func_or_class: Callable, name: str, config: DeploymentConfig) -> None:
        if not (inspect.isfunction(func_or_class) or inspect.isclass(func_or_class)):
            raise TypeError(
                "@serve.deployment decorates a function or a class, got "
                f"{type(func_or_class).__name__}"
            )
        if not isinstance(name, str) or not name or "#" in name:
            raise ConfigError(
                f"a deployment name must be a non-empty string without '#', got {name!r}"
            )
        self.func_or_class = func_or_class
        self.name = name
        self.config = config

    # Ray's read-only properties
    @property
    def num_replicas(self) -> int | None:
        return self.config.num_replicas

    @property
    def user_config(self) -> Any:
        return self.config.user_config

    @property
    def max_ongoing_requests(self) -> int:
        return self.config.max_ongoing_requests

    @property
    def ray_actor_options(self) -> dict:
        return self.config.ray_actor_options

    def options(self, **kwargs: Any) -> Deployment:
        """A copy with some settings changed (the rest kept)."""
        name = kwargs.pop("name", self.name)
        for ignored in ("version", "route_prefix"):
            kwargs.pop(ignored, None)
        unknown = sorted(set(kwargs) - DeploymentConfig.field_names())
        if unknown:
            raise ConfigError(f"unknown deployment option(s): {', '.join(unknown)}")
        return Deployment(self.func_or_class, name, self.config.replaced(**kwargs))

    def bind(self, *args: Any, **kwargs: Any) -> Application:
        return Application(self, args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"deployment {self.name!r} cannot be called directly: use .bind() to build an "
            "application and serve.run() it, then call it through a handle or HTTP"
        )

    def __repr__(self) -> str:
        return f"Deployment(name={self.name!r})"


class Application:
    """A bound deployment: the deployment with its constructor's arguments."""

    def __init__(self, deployment: Deployment, args: tuple, kwargs: dict) -> None:
        self.deployment = deployment
        self.args = args
        self.kwargs = kwargs

    def walk(self) -> list[Application]:
        """This node and every bound deployment under it, each once, dependencies first."""
        seen: dict[int, Application] = {}

        def visit(node: Application) -> None:
            if id(node) in seen:
                return
            for value in (*node.args, *node.kwargs.values()):
                if isinstance(value, Application):
                    visit(value)
            seen[id(node)] = node

        visit(self)
        return list(seen.values())


def deployment(_func_or_class: Callable | None = None, **options: Any) -> Any:
    """Ray's ``@serve.deployment`` (bare, or with options)."""
    name = options.pop("name", None)
    for ignored in _OWN_OPTIONS - {"name"}:
        options.pop(ignored, None)

    def wrap(target: Callable) -> Deployment:
        return Deployment(target, name or target.__name__, deployment_config(**options))

    return wrap(_func_or_class) if _func_or_class is not None else wrap
