"""``serve.status()``'s objects (Ray Serve's names), built from the controller's status."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class DeploymentStatusOverview:
    status: str
    status_trigger: str
    replica_states: dict[str, int]
    message: str = ""


@dataclass
class ApplicationStatusOverview:
    status: str
    message: str
    last_deployed_time_s: float
    deployments: dict[str, DeploymentStatusOverview] = field(default_factory=dict)


@dataclass
class ServeStatus:
    proxies: dict[str, str] = field(default_factory=dict)
    applications: dict[str, ApplicationStatusOverview] = field(default_factory=dict)
    target_capacity: float | None = None


def from_controller(raw: dict) -> ServeStatus:
    apps = {}
    for name, a in raw.get("applications", {}).items():
        deployments = {
            dname: DeploymentStatusOverview(
                status=d["status"],
                status_trigger="CONFIG_UPDATE_COMPLETED"
                if d["status"] == "HEALTHY"
                else "CONFIG_UPDATE_STARTED",
                replica_states=dict(Counter(r["state"] for r in d["replicas"])),
                message=d["message"],
            )
            for dname, d in a["deployments"].items()
        }
        apps[name] = ApplicationStatusOverview(
            a["status"], a["message"], a["last_deployed_time_s"], deployments
        )
    proxies = {n: p["status"] for n, p in raw.get("proxies", {}).items()}
    return ServeStatus(proxies, apps)
