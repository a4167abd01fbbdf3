"""A browser's way in to a dashboard that wants the token (``auth.TokenMiddleware``).

A browser cannot send ``Authorization`` on its own, and a ``?token=`` on the page's URL is not
on the URLs of its scripts, styles, REST calls and live stream. So the token becomes a cookie:

- ``GET <any page>?token=<token>`` (the link ``ember start`` and the 401 message give) sets an
  HttpOnly, SameSite=Strict cookie holding it and answers 303 to the same URL without the
  token, so it leaves the address bar and the history; everything after carries the cookie.
- A page asked for with no token gets a small login form; it posts to ``login`` (relative to
  the app's root, wherever a proxy mounts it), which sets the same cookie and answers 303 back.
- A wrong token gets the form again saying so (401), never a redirect: no loop.

Every URL written here is relative (the app may sit under a prefix a proxy strips), and the
cookie's path is the prefix when the dashboard knows it (else ``/``, which includes it).
"""

from __future__ import annotations

import asyncio
import html
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

from ember import config

Scope = dict[str, Any]
COOKIE = "ember_token"  # the plain name stays accepted; set ones carry the port (see below)
COOKIE_MAX_AGE = 30 * 24 * 3600  # as Ray's dashboard cookie: a month, or until the token changes
LOGIN_PATH = "/login"
# A stranger's login post is read only this far (a token is ~50 bytes) and within the
# pre-authentication deadline, as every unauthenticated peer is (ember.protocol.preauth).
MAX_LOGIN_BODY = 4096


def header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return ""


def cookie_tokens(scope: Scope) -> list[str]:
    """The values of the request's ``ember_token`` cookies (any of their names)."""
    found = []
    for part in header(scope, b"cookie").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE or name.startswith(COOKIE + "_"):
            found.append(unquote(value))
    return found


def wants_page(scope: Scope) -> bool:
    """A browser navigating (it asks for HTML), not a script or an API client."""
    return (
        scope["type"] == "http"
        and scope.get("method") in ("GET", "HEAD")
        and "text/html" in header(scope, b"accept")
    )


def query_without_token(scope: Scope) -> str:
    pairs = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    return urlencode([(k, v) for k, v in pairs if k != "token"])


def _cookie(scope: Scope, token: str) -> bytes:
    # Cookies are per host, not per port: two dashboards of one machine (two clusters, ports
    # 8265 and 8266) would overwrite each other's under one name, so the name carries the port
    # the browser used.
    port = header(scope, b"host").rpartition(":")[2]
    name = f"{COOKIE}_{port}" if port.isdigit() else COOKIE
    path = (scope.get("root_path") or "").rstrip("/") + "/"
    parts = [
        f"{name}={quote(token, safe='')}",
        f"Path={quote(path, safe='/')}",
        f"Max-Age={COOKIE_MAX_AGE}",
        "HttpOnly",
        "SameSite=Strict",
    ]
    if _https(scope):
        parts.append("Secure")
    return "; ".join(parts).encode("latin-1")


def _https(scope: Scope) -> bool:
    forwarded = header(scope, b"x-forwarded-proto").split(",")[0].strip()
    return scope.get("scheme") == "https" or forwarded == "https"


def _here(scope: Scope) -> str:
    """This request's URL, relative to itself (its last path segment), without the token."""
    raw = scope.get("raw_path") or quote(scope["path"]).encode()
    last = raw.decode("latin-1").rsplit("/", 1)[-1]
    # "./" first: a segment like "a:b" would otherwise read as a URL scheme.
    query = query_without_token(scope)
    return "./" + last + (f"?{query}" if query else "")


async def redirect_with_cookie(scope: Scope, send: Any, token: str, location: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [
                (b"location", location.encode("latin-1")),
                (b"set-cookie", _cookie(scope, token)),
                (b"cache-control", b"no-store"),
                (b"content-length", b"0"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})


async def clean_url(scope: Scope, send: Any, token: str) -> None:
    """The ``?token=`` visit: the cookie, and the same URL without the token."""
    await redirect_with_cookie(scope, send, token, _here(scope))


async def read_login(receive: Any) -> dict[str, str] | None:
    """The login form's fields; None when the body is too large or slow (the peer has not
    shown it has the token, so it gets a few KB and the deadline only)."""
    body = b""

    async def read() -> bool:
        nonlocal body
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return False
            body += message.get("body", b"")
            if len(body) > MAX_LOGIN_BODY:
                return False
            if not message.get("more_body"):
                return True

    try:
        complete = await asyncio.wait_for(read(), config.auth_deadline_seconds)
    except TimeoutError:
        return None
    if not complete:
        return None
    return dict(parse_qsl(body.decode("latin-1"), keep_blank_values=True))


def after_login(fields: dict[str, str]) -> str:
    """Where the form sends the browser back: the page it was shown on, relative to the
    login route (the app's root); never another site."""
    target = fields.get("next", "")
    if not target.startswith("/") or any(c in target for c in "\\\r\n") or "//" in target:
        target = "/"
    return "." + target


async def login_page(scope: Scope, send: Any, problem: str, where: str) -> None:
    """The form (401): a token field posting to the login route with the page to return to."""
    depth = max(scope["path"].count("/") - 1, 0)
    if scope["path"] == LOGIN_PATH:
        back = "/"
    else:
        query = query_without_token(scope)
        back = scope["path"] + (f"?{query}" if query else "")
    # Followed from another site's link, the browser withholds a SameSite=Strict cookie from
    # the whole chain of that navigation, the redirect included: the cookie may be set and
    # still not sent here. A reload this page starts is same-origin, so it goes along. The
    # browser says where a navigation came from (Sec-Fetch-Site) only to https and
    # localhost; without it the page reloads once, at most every 10 s per tab (so a browser
    # with no cookie for us shows the form after one reload, not in a loop). Not after a
    # wrong token: the form has something to say.
    site = header(scope, b"sec-fetch-site")
    retry = _RETRY if not problem and site in ("", "cross-site") else ""
    page = _PAGE.format(
        action=html.escape("../" * depth + LOGIN_PATH.lstrip("/")),
        back=html.escape(back),
        problem=f'<p class="problem" role="alert">{html.escape(problem)}</p>' if problem else "",
        where=html.escape(where),
        retry=retry,
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"text/html; charset=utf-8"),
                (b"cache-control", b"no-store"),
                (b"content-length", str(len(page)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else page})


_RETRY = (
    "<script>(function () { var k = 'ember.signInRetry', t = Number(sessionStorage.getItem(k)); "
    "if (Date.now() - t > 10000) { sessionStorage.setItem(k, String(Date.now())); "
    "location.reload(); } })();</script>"
)

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Ember dashboard: sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">{retry}
<style>
body {{ font: 15px system-ui, sans-serif; margin: 12vh auto; max-width: 34em; padding: 0 1em; }}
input[type=password] {{ width: 100%; padding: .4em; font: inherit; box-sizing: border-box; }}
button {{ margin-top: .8em; padding: .4em 1.2em; font: inherit; }}
.problem {{ color: #b00020; font-weight: 600; }}
.hint {{ color: #555; font-size: 90%; }}
</style></head>
<body><h1>Ember dashboard</h1>
{problem}
<p>This dashboard is reachable from other hosts, so it needs the cluster token.</p>
<form method="post" action="{action}" onsubmit="this.next.value += location.hash">
<label for="token">Cluster token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<input type="hidden" name="next" value="{back}">
<button type="submit">Open the dashboard</button>
</form>
<p class="hint">The token is {where}; <code>ember start --head</code> prints it. A link
<code>http://HOST:PORT/?token=&lt;token&gt;</code> signs in too. The browser keeps it in a
cookie for this site only; if this page comes back after the right token, allow cookies for
this site.</p>
</body></html>
"""
