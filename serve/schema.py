"""Ray Serve's config file (``serve deploy config.yaml``, the dashboard's PUT): checked field
by field, then each application imported and built.

Checking names the bad field and its place (``applications[0].deployments[1].num_replica``)
and nothing running is touched. An application whose ``import_path`` does not import fails
alone: the others in the file deploy.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from ember.serve.config import ConfigError, DeploymentConfig

TOP = {
    "applications",
    "http_options",
    "proxy_location",
    "grpc_options",
    "logging_config",
    "target_capacity",
    "controller_options",
    "tracing_config",
}
HTTP = {"host", "port", "root_path", "request_timeout_s", "keep_alive_timeout_s"}
APP = {
    "name",
    "route_prefix",
    "import_path",
    "runtime_env",
    "deployments",
    "args",
    "logging_config",
    "external_scaler_enabled",
    "host",
    "port",
    "autoscaling_policy",
}
# Ray's deployment fields Ember reads; the others in DEPLOYMENT_IGNORED are accepted and have
# no effect here (logging, placement groups of one replica, router plug-ins).
DEPLOYMENT = {
    "name",
    "num_replicas",
    "max_ongoing_requests",
    "max_queued_requests",
    "user_config",
    "autoscaling_config",
    "graceful_shutdown_wait_loop_s",
    "graceful_shutdown_timeout_s",
    "health_check_period_s",
    "health_check_timeout_s",
    "ray_actor_options",
}
DEPLOYMENT_IGNORED = {
    "logging_config",
    "placement_group_bundles",
    "placement_group_strategy",
    "max_replicas_per_node",
    "request_router_config",
    "backpressure_config",
    "placement_group_bundle_label_selector",
    "rolling_update_percentage",
    "max_surge_percent",
}


LOCAL_URI = "local://"


def _fields(where: str, value: Any, allowed: set[str]) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(value).__name__}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(unknown)}; valid fields: {', '.join(sorted(allowed))}"
        )


def validate(config: Any) -> None:
    """Raises ConfigError naming the first bad field; nothing is imported or deployed."""
    _fields("config", config, TOP)
    if "http_options" in config:
        _fields("http_options", config["http_options"], HTTP)
    apps = config.get("applications")
    if not isinstance(apps, list) or not apps:
        raise ConfigError("config: 'applications' must be a non-empty list")
    names, prefixes = set(), {}
    for i, app in enumerate(apps):
        where = f"applications[{i}]"
        _fields(where, app, APP)
        if (
            not isinstance(app.get("import_path"), str)
            or ":" not in app["import_path"]
            and "." not in app["import_path"]
        ):
            raise ConfigError(
                f"{where}.import_path must be 'module:attribute' (or 'module.attribute'), got {app.get('import_path')!r}"
            )
        name = app.get("name", "default")
        if name in names:
            raise ConfigError(f"{where}.name {name!r} is used by two applications")
        names.add(name)
        prefix = app.get("route_prefix", "/")
        if prefix is not None:
            if not isinstance(prefix, str) or not prefix.startswith("/"):
                raise ConfigError(f"{where}.route_prefix must start with '/', got {prefix!r}")
            if prefix in prefixes:
                raise ConfigError(
                    f"{where}.route_prefix {prefix!r} is also used by application {prefixes[prefix]!r}"
                )
            prefixes[prefix] = name
        for j, d in enumerate(app.get("deployments") or []):
            _fields(f"{where}.deployments[{j}]", d, DEPLOYMENT | DEPLOYMENT_IGNORED)
            if "name" not in d:
                raise ConfigError(f"{where}.deployments[{j}] needs a name")
            try:
                DeploymentConfig(**{k: v for k, v in d.items() if k in DEPLOYMENT and k != "name"})
            except (ConfigError, TypeError) as e:
                raise ConfigError(f"{where}.deployments[{j}] ({d['name']}): {e}") from None


def import_attr(import_path: str, working_dir: str | None = None) -> Any:
    """``module:attr`` (or ``module.attr``); ImportError/AttributeError say which part failed."""
    if working_dir and os.path.isdir(working_dir) and working_dir not in sys.path:
        sys.path.insert(0, working_dir)
    module_name, sep, attr = import_path.partition(":")
    if not sep:
        module_name, _, attr = import_path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(
            f"import_path {import_path!r}: module {module_name!r} does not import: {e}"
        ) from None
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AttributeError(
                f"import_path {import_path!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    return target


def build_applications(config: dict) -> dict[str, Any] | str:
    """{app name: (route_prefix, specs, ingress, its config entry) or the error text}; or the
    config's own error text (then nothing is deployed)."""
    from ember.serve.build import build_specs
    from ember.serve.deployment import Application

    try:
        validate(config)
    except ConfigError as e:
        return str(e)
    built: dict[str, Any] = {}
    for app_cfg in config["applications"]:
        name = app_cfg.get("name", "default")
        runtime_env = dict(app_cfg.get("runtime_env") or {})
        wd = runtime_env.get("working_dir")
        if isinstance(wd, str) and wd.startswith(LOCAL_URI):
            # Ray's spelling for a directory that exists on every node: the path itself here
            runtime_env["working_dir"] = wd = wd[len(LOCAL_URI) :]
        try:
            target = import_attr(app_cfg["import_path"], wd)
            if not isinstance(target, Application):
                if callable(target):  # an application builder: called with the config's args
                    target = target(app_cfg.get("args") or {})
                if not isinstance(target, Application):
                    raise TypeError(
                        f"import_path {app_cfg['import_path']!r} is not a bound application (.bind()) nor a builder returning one"
                    )
            overrides = {d["name"]: d for d in app_cfg.get("deployments") or []}
            for node in target.walk():
                o = overrides.pop(node.deployment.name, None)
                if o is not None:
                    opts = {k: v for k, v in o.items() if k in DEPLOYMENT and k != "name"}
                    node.deployment = node.deployment.options(**opts)
                if runtime_env:
                    rao = dict(node.deployment.config.ray_actor_options)
                    rao.setdefault("runtime_env", runtime_env)
                    node.deployment = node.deployment.options(ray_actor_options=rao)
            if overrides:
                raise ConfigError(
                    f"application {name!r}: no deployment named {', '.join(sorted(overrides))} in {app_cfg['import_path']}"
                )
            specs, ingress = build_specs(target, name)
            built[name] = (app_cfg.get("route_prefix", "/"), specs, ingress, app_cfg)
        except Exception as e:
            built[name] = f"{type(e).__name__}: {e}"
    return built
