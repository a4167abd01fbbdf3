"""``ember.serve``: Ray Serve's API on Ember (``from ember import serve``).

Deployments (``@serve.deployment``) composed into applications (``.bind()``) run as replica
actors managed by one controller actor; an HTTP proxy actor routes requests to them and
``DeploymentHandle``s call them from Python. See docs/architecture.md ("Serve").
"""

from __future__ import annotations

from ember.serve.api import (
    delete,
    get_app_handle,
    get_deployment_handle,
    ingress,
    run,
    shutdown,
    start,
    status,
)
from ember.serve.batching import batch
from ember.serve.config import AutoscalingConfig, DeploymentConfig
from ember.serve.context import get_replica_context
from ember.serve.deployment import Application, Deployment, deployment
from ember.serve.exceptions import BackPressureError, RayServeException
from ember.serve.handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator

# Ray Serve 0.8.5's API (the seed documents'): names the 2.x API does not use.
from ember.serve.legacy import (
    accept_batch,
    create_backend,
    create_endpoint,
    delete_backend,
    delete_endpoint,
    get_handle,
    init,
    set_traffic,
)

__all__ = [
    "Application",
    "AutoscalingConfig",
    "BackPressureError",
    "Deployment",
    "DeploymentConfig",
    "DeploymentHandle",
    "DeploymentResponse",
    "DeploymentResponseGenerator",
    "RayServeException",
    "accept_batch",
    "batch",
    "create_backend",
    "create_endpoint",
    "delete_backend",
    "delete_endpoint",
    "get_handle",
    "init",
    "set_traffic",
    "delete",
    "deployment",
    "get_app_handle",
    "get_deployment_handle",
    "get_replica_context",
    "ingress",
    "run",
    "shutdown",
    "start",
    "status",
]
