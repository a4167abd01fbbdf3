"""Serve's driver-side API (Ray Serve 2.x): start, run, delete, shutdown, status, handles.

Each call is a request to the controller actor; ``serve.run`` turns the application graph
into deployment specs (a bound deployment passed as an argument becomes a
``DeploymentHandle`` in the replica that receives it) and waits, with a deadline, until the
application runs or its deploy failed.
"""

from __future__ import annotations

import time
from typing import Any

import ember
import ember.serve.client as client
import ember.serve.context as context
import ember.serve.router as router
from ember.serve.build import build_specs
from ember.serve.controller import ServeController
from ember.serve.deployment import Application
from ember.serve.exceptions import RayServeException
from ember.serve.handle import DeploymentHandle
from ember.serve.names import CONTROLLER_NAME, DEFAULT_APP_NAME, NAMESPACE
from ember.serve.replica import ASGI_ATTR
from ember.serve.status import ServeStatus, from_controller

HTTP_OPTIONS = {
    "host",
    "port",
    "request_timeout_s",
    "keep_alive_timeout_s",
    "max_body_bytes",
    "location",
    "root_path",
}
RUN_TIMEOUT_S = 600.0  # serve.run's wait for the application to run (it may wait for nodes)
CALL_TIMEOUT_S = 60.0


def _ensure_init() -> None:
    if not ember.is_initialized():
        ember.init()


def _check_http_options(http_options: Any) -> dict:
    if http_options is None:
        return {}
    if not isinstance(http_options, dict):
        http_options = {k: v for k, v in vars(http_options).items() if v is not None}
    unknown = sorted(set(http_options) - HTTP_OPTIONS)
    if unknown:
        raise ValueError(
            f"unknown http_options field(s) {', '.join(unknown)}; valid: {', '.join(sorted(HTTP_OPTIONS))}"
        )
    port = http_options.get("port", 8000)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"http_options port must be a port number 1-65535, got {port!r}")
    return dict(http_options)


def start(
    http_options: Any = None,
    detached: bool = True,
    proxy_location: Any = None,
    grpc_options: Any = None,
    logging_config: Any = None,
) -> None:
    """Starts Serve on the cluster (the controller and its HTTP proxies) if it is not
    running. ``proxy_location``: Ray's EveryNode (the default: a proxy on every node),
    HeadOnly or Disabled. ``grpc_options`` (no gRPC proxy) and ``logging_config`` are
    accepted and have no effect yet."""
    _ensure_init()
    options = _check_http_options(http_options)
    if proxy_location is not None:
        from ember.serve.controller import proxy_location as location_name

        options["location"] = location_name(proxy_location)
    try:
        controller = client.get_controller()
    except RayServeException:
        from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = ember.get_runtime_context().get_node_id()
        controller = (
            ember.remote(ServeController)
            .options(
                name=CONTROLLER_NAME,
                namespace=NAMESPACE,
                lifetime="detached",
                get_if_exists=True,
                max_restarts=-1,  # a killed controller comes back and reconciles from the KV
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True),
            )
            .remote(options)
        )
    ember.get(controller.wait_proxy.remote(), timeout=CALL_TIMEOUT_S)


def _controller() -> Any:
    _ensure_init()
    return client.get_controller()


def run(
    target: Application,
    blocking: bool = False,
    name: str = DEFAULT_APP_NAME,
    route_prefix: str | None = "/",
    _timeout_s: float = RUN_TIMEOUT_S,
    logging_config: Any = None,  # Ray's; no effect yet
    external_scaler_enabled: bool = False,  # Ray's; no effect
) -> DeploymentHandle:
    """Deploys the application (replacing one of the same name) and returns its handle once
    it runs; raises with the reason if its deploy fails."""
    if route_prefix is not None and (
        not isinstance(route_prefix, str) or not route_prefix.startswith("/")
    ):
        raise ValueError(f"route_prefix must start with '/', got {route_prefix!r}")
    specs, ingress = build_specs(target, name)
    start()
    controller = client.get_controller()
    ember.get(
        controller.deploy_application.remote(name, route_prefix, specs, ingress),
        timeout=CALL_TIMEOUT_S,
    )
    wait_for_app(name, _timeout_s)
    if route_prefix is not None:
        ember.get(controller.wait_routed.remote(CALL_TIMEOUT_S), timeout=CALL_TIMEOUT_S + 5)
    handle = DeploymentHandle(ingress, name)
    if blocking:
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return handle


def wait_for_app(name: str, timeout_s: float) -> None:
    controller = client.get_controller()
    deadline = time.monotonic() + timeout_s
    while True:
        apps = ember.get(controller.get_status.remote(), timeout=CALL_TIMEOUT_S)["applications"]
        app = apps.get(name)
        status = app["status"] if app else "NOT_STARTED"
        if status == "RUNNING":
            # and this process routes with it: handles made now send at once
            epoch = ember.get(controller.get_status.remote(), timeout=CALL_TIMEOUT_S)["controller"][
                "epoch"
            ]
            client.routing_client().wait_epoch(epoch - 1, max(0.0, deadline - time.monotonic()))
            return
        if status in ("DEPLOY_FAILED", "UNHEALTHY"):
            raise RayServeException(f"application {name!r} failed to deploy: {app['message']}")
        if time.monotonic() > deadline:
            raise RayServeException(
                f"application {name!r} is not running after {timeout_s:.0f}s (status {status}"
                f"{': ' + app['message'] if app and app['message'] else ''})"
            )
        time.sleep(0.05)


def delete(name: str, _blocking: bool = True) -> None:
    controller = _controller()
    ember.get(controller.delete_application.remote(name), timeout=CALL_TIMEOUT_S)
    deadline = time.monotonic() + CALL_TIMEOUT_S
    while _blocking and time.monotonic() < deadline:
        if (
            name
            not in ember.get(controller.get_status.remote(), timeout=CALL_TIMEOUT_S)["applications"]
        ):
            return
        time.sleep(0.05)


def shutdown() -> None:
    """Deletes every application and stops the controller and the proxy."""
    if not ember.is_initialized():
        return
    try:
        controller = client.get_controller()
    except RayServeException:
        return
    try:
        ember.get(controller.graceful_shutdown.remote(), timeout=CALL_TIMEOUT_S)
    finally:
        ember.kill(controller)
        client.reset_routing_client()
        router.forget_routers()


def status() -> ServeStatus:
    try:
        controller = _controller()
    except RayServeException:
        return ServeStatus()
    return from_controller(ember.get(controller.get_status.remote(), timeout=CALL_TIMEOUT_S))


def get_app_handle(name: str) -> DeploymentHandle:
    apps = ember.get(_controller().app_names.remote(), timeout=CALL_TIMEOUT_S)
    if name not in apps:
        raise RayServeException(f"application {name!r} does not exist (running: {sorted(apps)})")
    return DeploymentHandle(apps[name], name)


def get_deployment_handle(deployment_name: str, app_name: str | None = None) -> DeploymentHandle:
    if app_name is None:
        try:
            app_name = context.get_replica_context().app_name
        except RayServeException:
            app_name = DEFAULT_APP_NAME
    status_ = ember.get(_controller().get_status.remote(), timeout=CALL_TIMEOUT_S)
    app = status_["applications"].get(app_name)
    if app is None or deployment_name not in app["deployments"]:
        raise RayServeException(
            f"deployment {deployment_name!r} does not exist in application {app_name!r}"
        )
    return DeploymentHandle(deployment_name, app_name)


def ingress(app: Any) -> Any:
    """``@serve.ingress(fastapi_app)`` on a deployment class: its HTTP requests are served by
    the app, whose routes may be the class's methods."""

    def decorate(cls: type) -> type:
        if not isinstance(cls, type):
            raise TypeError("@serve.ingress decorates a class (the deployment's class)")
        setattr(cls, ASGI_ATTR, app)
        return cls

    return decorate
