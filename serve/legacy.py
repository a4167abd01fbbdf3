"""Ray Serve 0.8.5's API (the seed documents'), on the 2.x machinery:
``serve.init()``, ``create_endpoint``, ``create_backend``, ``set_traffic``,
``delete_endpoint``/``delete_backend``, ``@serve.accept_batch``.

A backend is an application of its own (no route) running the user's function or class; an
endpoint is an application at its route whose one deployment splits the traffic among the
backends by weight. The weights are that deployment's ``user_config``, so ``set_traffic``
changes them in place, without a restart. Handlers get a Flask-like request (``.args``,
``.json``, ``.data``, ``.headers``, ``.method``, ``.path``), as 0.8.5's did.
"""

from __future__ import annotations

import json
import random
from typing import Any

import ember.serve.api as api
from ember.serve.batching import _BatchQueue
from ember.serve.deployment import deployment
from ember.serve.exceptions import RayServeException
from ember.serve.handle import DeploymentHandle

_BACKEND_APP = "backend:"
_ENDPOINT_APP = "endpoint:"
_endpoints: dict[str, dict] = {}  # this driver's view: {name: {route, methods, traffic}}
_backends: set[str] = set()
BACKEND_CONFIG = {"num_replicas", "max_batch_size", "batch_wait_timeout", "max_concurrent_queries"}


class _Args(dict):
    """Flask's ``request.args``: ``get`` gives the first value of a repeated key."""

    def get(self, key: str, default: Any = None, type: Any = None) -> Any:  # noqa: A002
        values = super().get(key)
        if not values:
            return default
        return type(values[0]) if type else values[0]

    def getlist(self, key: str) -> list:
        return list(super().get(key, []))


class FlaskLikeRequest:
    def __init__(self, method: str, path: str, args: dict, headers: dict, data: bytes) -> None:
        self.method = method
        self.path = path
        self.args = _Args(args)
        self.headers = headers
        self.data = data

    @property
    def json(self) -> Any:
        return json.loads(self.data) if self.data else None

    def get_json(self) -> Any:
        return self.json


def init(http_host: str = "127.0.0.1", http_port: int = 8000, **_ignored: Any) -> None:
    """Starts Serve (and Ember, if needed) with the proxy on http_host:http_port."""
    api.start(http_options={"host": http_host, "port": http_port})


def accept_batch(fn: Any) -> Any:
    """Marks a handler that takes a list of requests and returns a list of answers."""
    fn._serve_accept_batch = True
    return fn


class _Backend:
    def __init__(self, target: Any, args: tuple, max_batch_size: int | None, wait_s: float) -> None:
        self.call = target(*args) if isinstance(target, type) else target
        handler = type(self.call).__call__ if isinstance(target, type) else self.call
        self.batched = getattr(handler, "_serve_accept_batch", False)
        self.max_batch_size = max_batch_size or 1
        self.wait_s = wait_s
        self.queue: _BatchQueue | None = None

    async def __call__(self, request: FlaskLikeRequest) -> Any:
        if not self.batched:
            return self.call(request)
        if self.queue is None:
            self.queue = _BatchQueue(self._run_batch, self.max_batch_size, self.wait_s)
        return await self.queue.submit((request,), {})

    def _run_batch(self, requests: list) -> list:
        import ember.serve.context as context

        context.batch_size = len(requests)  # 0.8.5's serve.context.batch_size
        return self.call(requests)


class _Splitter:
    def __init__(self) -> None:
        self.weights: dict[str, float] = {}

    def reconfigure(self, config: dict) -> None:
        self.weights = dict(config["traffic"])

    async def __call__(self, request: Any) -> Any:
        if not self.weights:
            return "no traffic set for this endpoint: call serve.set_traffic()"
        backends, weights = zip(*self.weights.items(), strict=True)
        tag = random.choices(backends, weights)[0]
        body = await request.body()
        args: dict[str, list] = {}
        for k, v in request.query_params.multi_items():
            args.setdefault(k, []).append(v)
        req = FlaskLikeRequest(request.method, request.url.path, args, dict(request.headers), body)
        return await DeploymentHandle(tag, _BACKEND_APP + tag).remote(req)


def create_endpoint(
    endpoint_name: str, route: str | None = None, methods: list[str] | None = None
) -> None:
    if endpoint_name in _endpoints:
        raise RayServeException(f"endpoint {endpoint_name!r} already exists")
    _endpoints[endpoint_name] = {"route": route, "methods": methods or ["GET"], "traffic": {}}


def create_backend(
    backend_tag: str,
    func_or_class: Any,
    *actor_init_args: Any,
    ray_actor_options: dict | None = None,
    config: dict | None = None,
) -> None:
    """A backend's replicas hold no CPU unless ``ray_actor_options`` ask for some: 0.8.5
    created them as plain actors, which need a CPU to be placed but none while they run (so
    the document's programs, a handful of backends, run on a 2-CPU machine)."""
    config = dict(config or {})
    unknown = sorted(set(config) - BACKEND_CONFIG)
    if unknown:
        raise ValueError(
            f"unknown backend config field(s) {', '.join(unknown)}; valid: {', '.join(sorted(BACKEND_CONFIG))}"
        )
    if backend_tag in _backends:
        raise RayServeException(f"backend {backend_tag!r} already exists")
    options: dict[str, Any] = {
        "name": backend_tag,
        "num_replicas": config.get("num_replicas", 1),
        "ray_actor_options": {"num_cpus": 0, **(ray_actor_options or {})},
    }
    if config.get("max_concurrent_queries"):
        options["max_ongoing_requests"] = config["max_concurrent_queries"]
    if config.get("max_batch_size"):
        options["max_ongoing_requests"] = max(
            options.get("max_ongoing_requests", 5), 2 * config["max_batch_size"]
        )
    d = deployment(_Backend, **options)
    app = d.bind(
        func_or_class,
        actor_init_args,
        config.get("max_batch_size"),
        float(config.get("batch_wait_timeout", 0)),
    )
    api.run(app, name=_BACKEND_APP + backend_tag, route_prefix=None)
    _backends.add(backend_tag)


def set_traffic(endpoint_name: str, traffic_policy: dict[str, float]) -> None:
    if endpoint_name not in _endpoints:
        raise RayServeException(
            f"no endpoint {endpoint_name!r}: create it with serve.create_endpoint() first"
        )
    missing = sorted(set(traffic_policy) - _backends)
    if missing:
        raise RayServeException(
            f"no backend(s) {', '.join(missing)}: create them with serve.create_backend() first"
        )
    total = sum(traffic_policy.values())
    if any(w < 0 for w in traffic_policy.values()) or abs(total - 1.0) > 1e-6:
        raise ValueError(f"traffic weights must be >= 0 and sum to 1, got {traffic_policy}")
    ep = _endpoints[endpoint_name]
    ep["traffic"] = dict(traffic_policy)
    d = deployment(
        _Splitter,
        name=endpoint_name,
        user_config={"traffic": ep["traffic"]},
        max_ongoing_requests=100,
        ray_actor_options={"num_cpus": 0},  # Serve's own router in 0.8.5, not a user's backend
    )
    api.run(d.bind(), name=_ENDPOINT_APP + endpoint_name, route_prefix=ep["route"])


def delete_endpoint(endpoint: str) -> None:
    _endpoints.pop(endpoint, None)
    api.delete(_ENDPOINT_APP + endpoint)


def delete_backend(backend_tag: str) -> None:
    users = [e for e, ep in _endpoints.items() if backend_tag in ep["traffic"]]
    if users:
        raise RayServeException(
            f"backend {backend_tag!r} is used by endpoint(s) {', '.join(users)}; change their traffic first"
        )
    _backends.discard(backend_tag)
    api.delete(_BACKEND_APP + backend_tag)


def get_handle(endpoint_name: str) -> DeploymentHandle:
    return DeploymentHandle(endpoint_name, _ENDPOINT_APP + endpoint_name)
