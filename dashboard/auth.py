"""Plain ASGI middleware: the URL prefix (Ray #35269) and the token (Ray #15548).

Prefix: a reverse proxy may forward ``/ember/api/nodes`` as is or strip it to ``/api/nodes``;
both work. The prefix is moved into ``root_path`` so generated links (OpenAPI's ``/docs``) carry
it. ``X-Forwarded-Prefix`` sets it per request when no prefix was configured.

Token: when the dashboard is reachable from other hosts (bound to anything but loopback; the
empty host and the wildcards count as reachable: ``ember.listen_rules``), every request must carry the
cluster token as ``Authorization: Bearer <token>``, ``?token=<token>`` (for links and
WebSockets) or the ``ember_token`` cookie; otherwise 401 saying how to pass it. The API
documentation's scripts and styles (``/docs/static/``) need none: they are the same public
files on every install, and a browser loading them from ``/docs?token=...`` sends no token.
"""

from __future__ import annotations

import hmac
import json
from typing import Any
from urllib.parse import parse_qs

Scope = dict[str, Any]
PUBLIC_PREFIX = "/docs/static/"  # routes/api_docs.py's vendored Swagger UI and ReDoc files


class PrefixMiddleware:
    def __init__(self, app: Any, prefix: str = "") -> None:
        self.app = app
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            prefix = self.prefix or _header(scope, b"x-forwarded-prefix").rstrip("/")
            if prefix:
                path = scope["path"]
                if path == prefix or path.startswith(prefix + "/"):
                    path = path[len(prefix) :] or "/"
                scope = dict(scope, path=path, root_path=scope.get("root_path", "") + prefix)
        await self.app(scope, receive, send)


# Where a 401 says the token is, by where the dashboard got it (``server.token_place``).
CLUSTER_TOKEN_PLACE = "in <session_dir>/cluster_token on the head"
ENV_TOKEN_PLACE = "the EMBER_TOKEN the dashboard was started with"
DASHBOARD_TOKEN_PLACE = "in <session_dir>/dashboard_token on the head"


class TokenMiddleware:
    def __init__(self, app: Any, token: str | None, where: str = CLUSTER_TOKEN_PLACE) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.where = where

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if self.token is None or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if self._authorised(scope) or scope["path"].startswith(PUBLIC_PREFIX):
            await self.app(scope, receive, send)
            return
        message = (
            "this dashboard is reachable from other hosts, so it needs the cluster token: send "
            "'Authorization: Bearer <token>', add '?token=<token>' to the URL, or set the "
            f"'ember_token' cookie (the token is {self.where}; the ember CLI and drivers read "
            "it from the EMBER_TOKEN environment variable)"
        )
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 4401, "reason": "token required"})
            return
        body = json.dumps({"detail": message}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="ember"'),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _authorised(self, scope: Scope) -> bool:
        assert self.token is not None
        auth = _header(scope, b"authorization")
        if auth.lower().startswith("bearer ") and _same(auth[7:].strip(), self.token):
            return True
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if any(_same(t, self.token) for t in query.get("token", ())):
            return True
        for part in _header(scope, b"cookie").split(";"):
            name, _, value = part.strip().partition("=")
            if name == "ember_token" and _same(value, self.token):
                return True
        return False


def _same(given: str, token: bytes) -> bool:
    return hmac.compare_digest(given.encode("latin-1", "replace"), token)


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return ""
