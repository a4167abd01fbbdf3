"""Serve's fixed names: the controller's actor name and namespace, and its GCS KV keys.

The dashboard's Serve routes read and write the same KV keys without importing this package
(the import layers forbid it), so the keys are also written out in docs/architecture.md.
"""

from __future__ import annotations

NAMESPACE = "serve"  # actors' namespace and the KV namespace
CONTROLLER_NAME = "SERVE_CONTROLLER_ACTOR"  # Ray Serve's name for it
PROXY_NAME_PREFIX = "SERVE_PROXY_ACTOR-"
REPLICA_NAME_PREFIX = "SERVE_REPLICA::"

KV_APP_PREFIX = b"app:"  # app:<name> -> cloudpickle of the application's desired state
KV_REPLICAS = b"replicas"  # JSON {replica actor name: {app, deployment, version}}
KV_HTTP_OPTIONS = b"http_options"  # JSON {host, port, request_timeout_s, ...}
KV_STATUS = b"status"  # JSON: what `serve status` and GET /api/serve/applications/ show
KV_CONFIG_REQUEST = b"config_request"  # JSON {"seq": n, "config": {...}} from the dashboard
KV_DECISIONS = b"decisions"  # JSON list, the controller's recent decisions (bounded)
KV_REQUEST_METRICS = b"request_metrics"  # JSON: request counters (serve/request_metrics.py)

DEFAULT_APP_NAME = "default"
