"""Plain ASGI middleware: the URL prefix (Ray #35269) and the token (Ray #15548).

Prefix: a reverse proxy may forward ``/ember/api/nodes`` as is or strip it to ``/api/nodes``;
both work. The prefix is moved into ``root_path`` so generated links (OpenAPI's ``/docs``) carry
it. ``X-Forwarded-Prefix`` sets it per request when no prefix was configured.

Token: when the dashboard is reachable from other hosts (bound to anything but loopback; the
empty host and the wildcards count as reachable: ``ember.listen_rules``), every request must carry the
cluster token as ``Authorization: Bearer <token>`` (or ``X-Ray-Authorization``, as Ray's
clients send it through proxies), ``?token=<token>`` or an ``ember_token`` cookie; otherwise
401 saying how to pass it. A browser's way in (the cookie a ``?token=`` link or the login form
sets, the form itself) is ``login.py``. The API
documentation's scripts and styles (``/docs/static/``) need none: they are the same public
files on every install, and a browser loading them from ``/docs?token=...`` sends no token.
"""

from __future__ import annotations

import hmac
import json
from typing import Any
from urllib.parse import parse_qs

from ember.dashboard import login

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
        if scope["type"] == "http" and scope["path"] == login.LOGIN_PATH:
            if scope.get("method") == "POST":
                await self._login(scope, receive, send)
                return
        page = login.wants_page(scope)
        in_url = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [])
        if page and in_url:
            # A link with the token: a cookie instead, and the URL without it.
            if any(_same(t, self.token) for t in in_url):
                await login.clean_url(scope, send, self.token.decode("latin-1"))
            else:
                problem = "The token in the link is not this dashboard's token."
                await login.login_page(scope, send, problem, self.where)
            return
        if (
            self._authorised(scope)
            or any(_same(t, self.token) for t in in_url)
            or scope["path"].startswith(PUBLIC_PREFIX)
        ):
            await self.app(scope, receive, send)
            return
        if page:
            await login.login_page(scope, send, "", self.where)
            return
        message = (
            "this dashboard is reachable from other hosts, so it needs the cluster token: send "
            "'Authorization: Bearer <token>' (Ray's clients do with RAY_AUTH_MODE=token "
            "RAY_AUTH_TOKEN=<token>), or add '?token=<token>' to the URL (a browser then keeps "
            f"it in a cookie); the token is {self.where}; the ember CLI takes it from --token "
            "or the EMBER_TOKEN environment variable"
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

    async def _login(self, scope: Scope, receive: Any, send: Any) -> None:
        """The login form's post: the cookie and back to the page, or the form saying why."""
        assert self.token is not None
        fields = await login.read_login(receive)
        if fields is None:
            problem = "The sign-in request was too large or too slow; try again."
        elif _same(fields.get("token", "").strip(), self.token):
            token = self.token.decode("latin-1")
            await login.redirect_with_cookie(scope, send, token, login.after_login(fields))
            return
        else:
            problem = "That is not this dashboard's token."
        await login.login_page(scope, send, problem, self.where)

    def _authorised(self, scope: Scope) -> bool:
        """The token in a header (Ray's clients send ``Authorization``, or
        ``X-Ray-Authorization`` through proxies that use the first) or a cookie."""
        assert self.token is not None
        for name in (b"authorization", b"x-ray-authorization"):
            auth = _header(scope, name)
            if auth.lower().startswith("bearer ") and _same(auth[7:].strip(), self.token):
                return True
        return any(_same(t, self.token) for t in login.cookie_tokens(scope))


def _same(given: str, token: bytes) -> bool:
    return hmac.compare_digest(given.encode("latin-1", "replace"), token)


_header = login.header
