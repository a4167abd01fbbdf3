"""The Serve controller's status record (the KV's ``serve``/``status`` JSON) in the shape of
Ray Serve's ``ServeInstanceDetails`` (ray/serve/schema.py), which Ray's ``serve status`` CLI
parses with pydantic: every field it requires is here, with its enum values."""

from __future__ import annotations

from typing import Any

# The DeploymentSchema fields of a deployment config (Ray's names).
DEPLOYMENT_FIELDS = (
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
)
TRIGGERS = {
    "HEALTHY": "CONFIG_UPDATE_COMPLETED",
    "UPDATING": "CONFIG_UPDATE_STARTED",
    "UPSCALING": "AUTOSCALING",
    "DOWNSCALING": "AUTOSCALING",
    "UNHEALTHY": "REPLICA_STARTUP_FAILED",
}


def empty() -> dict[str, Any]:
    """No Serve on the cluster (Ray's ``get_empty_schema_dict``)."""
    return {"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": None}


def _deployment(name: str, d: dict[str, Any]) -> dict[str, Any]:
    cfg = d.get("deployment_config") or {}
    schema = {"name": name, **{k: cfg[k] for k in DEPLOYMENT_FIELDS if cfg.get(k) is not None}}
    if "runtime_env" in (schema.get("ray_actor_options") or {}):
        # the application's runtime_env, which the app's own entry shows (as its URI); Ray's
        # schema takes only URIs here, and Ember gives the replicas the local path
        schema["ray_actor_options"] = {
            k: v for k, v in schema["ray_actor_options"].items() if k != "runtime_env"
        }
    if schema.get("autoscaling_config"):
        schema.pop("num_replicas", None)
    rao = cfg.get("ray_actor_options") or {}
    return {
        "name": name,
        "status": d["status"],
        "status_trigger": TRIGGERS.get(d["status"], "UNSPECIFIED"),
        "message": d.get("message", ""),
        "deployment_config": schema,
        "target_num_replicas": d.get("target_num_replicas", 0),
        "required_resources": {"CPU": rao.get("num_cpus", 1), **(rao.get("resources") or {})},
        "replicas": [
            {
                "replica_id": r["replica_id"],
                "state": r["state"],
                "pid": r.get("pid"),
                "actor_name": r.get("actor_name"),
                "actor_id": r.get("actor_id"),
                "node_id": r.get("node_id"),
                "start_time_s": r.get("start_time_s", 0.0),
            }
            for r in d.get("replicas", ())
        ],
    }


def instance_details(status: dict[str, Any]) -> dict[str, Any]:
    apps = {}
    for name, a in status.get("applications", {}).items():
        config = a.get("deployed_app_config")
        apps[name] = {
            "name": name,
            "route_prefix": a.get("route_prefix"),
            "docs_path": None,
            "status": a["status"],
            "message": a.get("message", ""),
            "last_deployed_time_s": a.get("last_deployed_time_s", 0.0),
            "deployed_app_config": config,
            "source": "declarative" if config else "imperative",
            "external_scaler_enabled": False,
            "deployments": {n: _deployment(n, d) for n, d in a.get("deployments", {}).items()},
        }
    http = status.get("http_options") or {}
    controller = status.get("controller") or {}
    return {
        "controller_info": {"node_id": controller.get("node_id")},
        "proxy_location": status.get("proxy_location") or "HeadOnly",
        "http_options": {
            k: http[k]
            for k in ("host", "port", "request_timeout_s", "keep_alive_timeout_s")
            if http.get(k) is not None
        },
        "proxies": {
            node: {"node_id": p.get("node_id"), "status": p.get("status", "STARTING")}
            for node, p in (status.get("proxies") or {}).items()
        },
        "applications": apps,
        "target_capacity": None,
    }
