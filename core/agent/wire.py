"""The agent↔dashboard stream: one gRPC bidirectional stream per agent, JSON messages.

gRPC because the brief chose it for agent→dashboard streams (reconnects, keep-alives, flow
control, TLS-ready, other languages); a generic handler with our own serializer because the
messages are small JSON documents and generated stubs would add a protoc build step for no
gain. JSON, not pickle: the dashboard must never unpickle what the network sends it.

Agent → dashboard:  {"type": "hello", "node_id", "info"}
                    {"type": "metrics", "time", "sample", "workers", "logs"}
                    {"type": "task_events", "job_id", "worker_id", "events", "dropped", "folded"}
                    {"type": "event", "severity", "message", "kind", "pid", "detail"}
                    {"type": "reply", "rid", "body"} | {"type": "reply", "rid", "error"}
Dashboard → agent:  {"type": "request", "rid", "op", "body"}
The token, when the dashboard has one, travels as the ``ember-token`` metadata entry.
"""

from __future__ import annotations

import json
from typing import Any

METHOD = "/ember.dashboard.Agents/Connect"
SERVICE = "ember.dashboard.Agents"
TOKEN_KEY = "ember-token"
# gRPC's 4 MB default is too small for a log chunk or a profile; 64 MB bounds one message.
MAX_MESSAGE = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":"), default=_default).encode()


def decode(data: bytes) -> dict[str, Any]:
    msg = json.loads(data)
    if not isinstance(msg, dict) or "type" not in msg:
        raise ValueError("an agent message must be a JSON object with a 'type'")
    return msg


def _default(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return obj.hex()
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return str(obj)
