"""Reaching a cluster's dashboard over HTTP from a tool or a program (the ``ember`` CLI,
``ember.util.state``): finding its URL and token, and calling its REST API with a deadline.

``address`` is the dashboard's URL (``http://host:8265``) or the cluster's GCS address
(``host:port``, a socket path, ``auto``); from a GCS address the dashboard's URL is read from
the GCS (the dashboard publishes it there when it starts). Default: ``EMBER_DASHBOARD_URL``,
then ``EMBER_ADDRESS``, then the newest local session. The token of a dashboard bound to a
non-loopback address comes from ``EMBER_DASHBOARD_TOKEN`` or the session's token files
(``ember.cluster_token.dashboard_token``).

Errors are ``DashboardError`` with a one-line message that says what to do; the CLI shows it
as is.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ember.cluster_token import dashboard_token

DEFAULT_TIMEOUT = 30.0
PAGE = 10_000  # the API's largest page


class DashboardError(Exception):
    """The dashboard could not be found or reached, or refused a request (the message says
    which, and what to do)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status of a refused request


class DashboardClient:
    def __init__(self, url: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _request(
        self, method: str, path: str, params: dict[str, Any] | list[tuple[str, Any]] | None
    ) -> urllib.request.Request:
        items = list(params.items()) if isinstance(params, dict) else list(params or [])
        query = urllib.parse.urlencode([(k, _param(v)) for k, v in items if v is not None])
        req = urllib.request.Request(
            f"{self.url}{path}" + (f"?{query}" if query else ""), method=method
        )
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        return req

    def open(self, method: str, path: str, params: Any = None, timeout: float | None = None):
        req = self._request(method, path, params)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raise DashboardError(_http_error(e), e.code) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise DashboardError(
                f"could not reach the dashboard at {self.url} ({reason}); is the cluster "
                "running? Pass --address http://HOST:PORT or the cluster's address."
            ) from None

    def get(self, path: str, params: Any = None, timeout: float | None = None) -> Any:
        with self.open("GET", path, params, timeout) as resp:
            return json.loads(resp.read())

    def post(self, path: str, params: Any = None) -> Any:
        with self.open("POST", path, params) as resp:
            return json.loads(resp.read())

    def list_all(
        self, path: str, filters: list[str] = (), limit: int | None = None, **params: Any
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Rows of a list endpoint, paged, at most ``limit``; returns (rows, last page)."""
        rows: list[dict[str, Any]] = []
        last: dict[str, Any] = {"total": 0}
        while limit is None or len(rows) < limit:
            want = PAGE if limit is None else min(PAGE, limit - len(rows))
            query = [("limit", want), ("offset", len(rows)), *(("filter", f) for f in filters)]
            query += list(params.items())
            last = self.get(path, query)
            rows.extend(last["items"])
            if not last["items"] or len(rows) >= last["total"]:
                break
        return rows, last


def _param(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _http_error(e: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(e.read() or b"{}")
    except ValueError:
        body = {}
    detail = body.get("message") or body.get("detail") or e.reason
    if isinstance(detail, list):  # FastAPI's validation errors: name each field
        detail = "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', [])[1:])}: {d.get('msg')}" for d in detail
        )
    return f"{detail} (HTTP {e.code})"


def connect_dashboard(address: str | None = None) -> DashboardClient:
    """The dashboard to talk to, from ``address`` and the environment."""
    url = address if address and address.startswith(("http://", "https://")) else None
    if url is None and not address:
        url = os.environ.get("EMBER_DASHBOARD_URL")
    session_dir = None
    if url is None:
        url, session_dir = _from_gcs(address)
    return DashboardClient(url, dashboard_token(session_dir))


def _from_gcs(address: str | None) -> tuple[str, str | None]:
    """The dashboard's URL the GCS publishes, and the local session's dir if it is one."""
    from ember.cluster_address import find_gcs_address
    from ember.protocol import connection as conn_mod

    try:
        gcs_address = find_gcs_address(address)
    except ConnectionError as e:
        raise DashboardError(str(e)) from None

    async def lookup() -> bytes | None:
        conn = await conn_mod.connect(gcs_address, name="gcs", timeout=5.0)
        try:
            return await conn.call(
                "kv_get", {"namespace": "dashboard", "key": b"url"}, timeout=10.0
            )
        finally:
            conn.close()

    loop = conn_mod.new_event_loop()
    try:
        url = loop.run_until_complete(lookup())
    except (OSError, TimeoutError, ConnectionError) as e:
        raise DashboardError(
            f"could not reach the cluster at {address or gcs_address} ({e}); pass --address"
        ) from None
    finally:
        loop.close()
    if not url:
        raise DashboardError(
            f"the cluster at {gcs_address} runs no dashboard (ember.init(include_dashboard="
            "False)?); the diagnostics commands need it"
        )
    session = None
    if gcs_address.startswith("unix:"):  # a local session: its dir holds the token
        session = os.path.dirname(os.path.dirname(gcs_address[5:]))
    return url.decode() if isinstance(url, bytes) else str(url), session
