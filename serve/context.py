"""What code inside a replica can ask about itself: ``serve.get_replica_context()`` and the
current request's id (a context variable, so concurrent requests each see their own)."""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass
from typing import Any

from ember.serve.exceptions import RayServeException


@dataclass
class ReplicaContext:
    app_name: str
    deployment: str
    replica_tag: str  # Ray's name for the replica id
    servable_object: Any
    rank: int = 0
    world_size: int = 1

    @property
    def replica_id(self) -> str:
        return self.replica_tag


@dataclass(frozen=True)
class RequestContext:
    request_id: str = ""
    route: str = ""
    app_name: str = ""
    multiplexed_model_id: str = ""


_replica: ReplicaContext | None = None
batch_size = 0  # Ray Serve 0.8.5's serve.context.batch_size, inside an @accept_batch call
_NO_REQUEST = RequestContext()
_request: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "ember_serve_request", default=None
)


def get_replica_context() -> ReplicaContext:
    """The running replica's context; an error outside a replica (as in Ray)."""
    if _replica is None:
        raise RayServeException(
            "serve.get_replica_context() may only be called from within a Serve deployment's "
            "replica (its constructor or a method)."
        )
    return _replica


def set_replica_context(ctx: ReplicaContext | None) -> None:
    global _replica
    _replica = ctx


def request_context() -> RequestContext:
    return _request.get() or _NO_REQUEST


def set_request_context(ctx: RequestContext) -> contextvars.Token:
    return _request.set(ctx)


def reset_request_context(token: contextvars.Token) -> None:
    _request.reset(token)


class RequestIdFilter(logging.Filter):
    """Puts the current request's id into every log line a replica writes while handling it,
    so one request's lines can be found across the proxy and the replicas (X-Request-ID)."""

    def __init__(self, replica: str) -> None:
        super().__init__()
        self.replica = replica

    def filter(self, record: logging.LogRecord) -> bool:
        rid = request_context().request_id
        record.request_id = rid
        if rid and not getattr(record, "_serve_tagged", False):
            record._serve_tagged = True  # a record passes several handlers: tag it once
            record.msg = f"[{self.replica} request_id={rid}] {record.msg}"
        return True
