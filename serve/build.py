"""An application graph as the controller's deployment specs (``serve.run`` and a config
file's applications both come through here)."""

from __future__ import annotations

import hashlib
from typing import Any

import cloudpickle
from ember.serve.deployment import Application, Deployment
from ember.serve.deployment_state import DeploymentSpec
from ember.serve.handle import DeploymentHandle
from ember.serve.replica import ASGI_ATTR


def _deployment_args(value: Any, handles: dict[int, DeploymentHandle]) -> Any:
    if isinstance(value, Application):
        return handles[id(value)]
    if isinstance(value, list | tuple):
        return type(value)(_deployment_args(v, handles) for v in value)
    if isinstance(value, dict):
        return {k: _deployment_args(v, handles) for k, v in value.items()}
    return value


def build_specs(app: Application, app_name: str) -> tuple[list[DeploymentSpec], str]:
    """The graph's deployments (names made unique as Ray does: name, name_1, ...) and the
    ingress deployment's name."""
    if isinstance(app, Deployment):
        raise TypeError(
            f"serve.run() takes an application: call .bind() on deployment {app.name!r} first"
        )
    if not isinstance(app, Application):
        raise TypeError(
            f"serve.run() takes a bound deployment (an Application), got {type(app).__name__}"
        )
    nodes = app.walk()
    names: dict[int, str] = {}
    taken: set[str] = set()
    for node in nodes:
        name, n = node.deployment.name, 0
        while name in taken:
            n += 1
            name = f"{node.deployment.name}_{n}"
        taken.add(name)
        names[id(node)] = name
    handles = {id(node): DeploymentHandle(names[id(node)], app_name) for node in nodes}
    specs = []
    for node in nodes:
        d = node.deployment
        args = _deployment_args(node.args, handles)
        kwargs = _deployment_args(node.kwargs, handles)
        code = cloudpickle.dumps((d.func_or_class, args, kwargs, d.config.ray_actor_options))
        specs.append(
            DeploymentSpec(
                names[id(node)],
                d.func_or_class,
                args,
                kwargs,
                d.config,
                hashlib.sha1(code).hexdigest(),
                getattr(d.func_or_class, ASGI_ATTR, None) is not None,
            )
        )
    return specs, names[id(app)]
