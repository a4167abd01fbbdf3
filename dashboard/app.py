"""The FastAPI application: the state, the agents and the GCS behind one ``DashboardContext``.

``create_app`` builds the app for the server process and for tests (which pass their own
state and, when they need none, no agents or GCS). Routers come from ``routers.ROUTERS``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from ember.dashboard.auth import CLUSTER_TOKEN_PLACE, PrefixMiddleware, TokenMiddleware
from ember.dashboard.query import QueryError
from ember.dashboard.routers import ROUTERS
from ember.dashboard.state import DashboardState
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

VERSION = "0.1.0"
# What ``/api/version`` tells Ray's clients: the Jobs API version they expect (Ray's own
# ``version``) and the Ray release whose state API this dashboard speaks (``ray_version``,
# which they compare with their minimum).
RAY_JOBS_API_VERSION = "4"
RAY_COMPAT_VERSION = "2.60.0"


class AgentUnavailable(RuntimeError):
    """The node's agent is not connected (or did not answer in time); the message says which."""


@dataclass
class DashboardContext:
    state: DashboardState
    hub: Any = None  # ember.dashboard.agent_hub.AgentHub: calls to the agents
    gcs: Any = None  # ember.dashboard.gcs_client.GcsClient: actors, kill, cluster status
    host: str = "127.0.0.1"
    port: int = 0
    prefix: str = ""
    session_dir: str = ""
    frontend_dir: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def create_app(
    ctx: DashboardContext, token: str | None = None, token_place: str = CLUSTER_TOKEN_PLACE
) -> Any:
    """The ASGI app: FastAPI wrapped in the token check and the prefix handling.
    ``token_place`` is where a 401 tells the user to find the token."""
    app = FastAPI(
        title="Ember dashboard",
        version=VERSION,
        description="Cluster state, tasks, actors, logs, stacks and profiles of an Ember cluster.",
        # FastAPI's pages load their scripts from a CDN: routes/api_docs.py serves local ones.
        docs_url=None,
        redoc_url=None,
    )
    app.state.ctx = ctx
    for module, attr in ROUTERS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            continue  # a feature not on this branch
        app.include_router(getattr(mod, attr))

    @app.exception_handler(QueryError)
    async def _query_error(request: Request, exc: QueryError) -> JSONResponse:
        return JSONResponse(
            status_code=422,
            content={
                "detail": [{"loc": ["query", exc.field], "msg": str(exc), "type": "value_error"}]
            },
        )

    @app.exception_handler(AgentUnavailable)
    async def _agent_unavailable(request: Request, exc: AgentUnavailable) -> JSONResponse:
        return JSONResponse(status_code=503, content={"detail": str(exc)})

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's shape, with a one-line summary naming each field at fault.
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        names = ", ".join(".".join(str(p) for p in e["loc"]) for e in errors)
        if "/api/v0/" in request.url.path:
            # Ray's clients read an error from Ray's envelope, not from FastAPI's shape.
            why = "; ".join(f"{e['loc'][-1]}: {e['msg']}" for e in errors)
            return JSONResponse(
                status_code=400,
                content={"result": False, "msg": f"invalid {why}", "data": {}, "detail": errors},
            )
        return JSONResponse(
            status_code=422, content={"detail": errors, "message": f"invalid: {names}"}
        )

    if token:
        _declare_token(app)
    wrapped: Any = TokenMiddleware(app, token, token_place)
    wrapped = PrefixMiddleware(wrapped, ctx.prefix)
    wrapped.fastapi = app  # tests and the Prometheus module reach the FastAPI object through this
    return wrapped


def _declare_token(app: FastAPI) -> None:
    """The spec says every route needs the token, in each way ``TokenMiddleware`` takes it, so
    Swagger UI's Authorize button and generated clients send it. (The middleware checks it,
    not the routes, so FastAPI cannot see it.)"""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        spec = build()  # FastAPI caches it: add the schemes once
        if "securitySchemes" not in spec.setdefault("components", {}):
            spec["components"]["securitySchemes"] = {
                "bearerToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the cluster token (EMBER_TOKEN; the head's "
                    "<session_dir>/cluster_token), as 'Authorization: Bearer <token>'",
                },
                "tokenQuery": {"type": "apiKey", "in": "query", "name": "token"},
                "tokenCookie": {"type": "apiKey", "in": "cookie", "name": "ember_token"},
            }
            # Alternatives: any one of them will do.
            spec["security"] = [{"bearerToken": []}, {"tokenQuery": []}, {"tokenCookie": []}]
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


async def get_ctx(request: Request) -> DashboardContext:
    return request.app.state.ctx
