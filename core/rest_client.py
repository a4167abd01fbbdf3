"""The runtime's HTTP client of a cluster's REST API (the dashboard serves it; this module
imports nothing of the dashboard's wing): reaching it from a tool or a program (the ``ember`` CLI,
``ember.util.state``): finding its URL and token, and calling its REST API with a deadline.

``address`` is the dashboard's URL (``http://host:8265``) or the cluster's GCS address
(``host:port``, a socket path, ``auto``); from a GCS address the dashboard's URL is read from
the GCS (the dashboard publishes it there when it starts). Default: ``EMBER_DASHBOARD_URL``,
then ``EMBER_ADDRESS`` (either form), then the newest local session (under ``temp_dir``).
The token (for the GCS over TCP, and for a dashboard bound off loopback) is ``token``
(``--token``), else ``EMBER_TOKEN``, else the local session's token file.

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

from ember.cluster_token import TOKEN_FILE, dashboard_token, user_token
from ember.listen_rules import is_local_only

DEFAULT_TIMEOUT = 30.0
PAGE = 10_000  # the API's largest page


class DashboardError(Exception):
    """The dashboard could not be found or reached, or refused a request (the message says
    which, and what to do)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status of a refused request


TOKEN_HOWTO = "pass --token or set EMBER_TOKEN"


def token_place(session_dir: str | None) -> str:
    """Where the user finds the token, for error messages."""
    if session_dir:
        return os.path.join(session_dir, TOKEN_FILE)
    return f"the head's <session_dir>/{TOKEN_FILE}"


class DashboardClient:
    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        session_dir: str | None = None,
        note: str = "",
    ):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.session_dir = session_dir  # the local session found, where its token is
        self.note = note  # said when it cannot be reached (how its URL was found)

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

    def open(
        self,
        method: str,
        path: str,
        params: Any = None,
        timeout: float | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
    ):
        req = self._request(method, path, params)
        if body is not None:
            req.data = body
            req.add_header("Content-Type", content_type)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            if e.code == 401:
                raise DashboardError(self._unauthorised(), e.code) from None
            raise DashboardError(_http_error(e), e.code) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise DashboardError(
                f"could not reach the dashboard at {self.url} ({reason}){self.note}; is the "
                "cluster running? Pass --address http://HOST:PORT or the cluster's address."
            ) from None

    def _unauthorised(self) -> str:
        where = token_place(self.session_dir)
        if self.token:
            return (
                f"the dashboard at {self.url} refused the token given: {TOKEN_HOWTO} to the "
                f"head's cluster token (it is in {where})"
            )
        return (
            f"the dashboard at {self.url} needs the cluster token: {TOKEN_HOWTO} (it is in {where})"
        )

    def get(self, path: str, params: Any = None, timeout: float | None = None) -> Any:
        with self.open("GET", path, params, timeout) as resp:
            return json.loads(resp.read())

    def post(self, path: str, params: Any = None) -> Any:
        with self.open("POST", path, params) as resp:
            return json.loads(resp.read())

    def send_json(self, method: str, path: str, document: Any = None) -> Any:
        """A request with a JSON body (None: no body); the reply's JSON."""
        body = None if document is None else json.dumps(document).encode()
        with self.open(method, path, body=body) as resp:
            return json.loads(resp.read() or b"null")

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


def connect_dashboard(
    address: str | None = None, token: str | None = None, temp_dir: str | None = None
) -> DashboardClient:
    """The dashboard to talk to, from ``address``, ``token`` (``--token``), ``temp_dir`` (where
    local sessions are) and the environment."""
    from ember.cluster_address import is_dashboard_url, local_node_for_dashboard

    address = (
        address or os.environ.get("EMBER_DASHBOARD_URL") or os.environ.get("EMBER_ADDRESS") or None
    )
    if is_dashboard_url(address):
        url, note, session_dir = address, "", None
        if user_token(token) is None:  # a dashboard of this machine: its session has it
            node = local_node_for_dashboard(address, temp_dir)
            session_dir = node["session_dir"] if node else None
    else:
        url, note, session_dir = _from_gcs(address, token, temp_dir)
    found = dashboard_token(session_dir, token=token)
    if found is not None and len(found.split()) != 1:
        raise DashboardError(f"the token given is not one word: {TOKEN_HOWTO} to the token alone")
    return DashboardClient(url, found, session_dir=session_dir, note=note)


def _from_gcs(
    address: str | None, token: str | None, temp_dir: str | None
) -> tuple[str, str, str | None]:
    """The dashboard's URL the GCS publishes, a note on how it was found, and the local
    session's dir if this machine runs a node of that cluster."""
    from ember.cluster_address import find_gcs_address, local_node_for, token_for
    from ember.protocol import connection as conn_mod

    try:
        gcs_address = find_gcs_address(address, temp_dir)
    except (ConnectionError, ValueError) as e:
        raise DashboardError(str(e)) from None
    session = None
    secret = None
    if gcs_address.startswith("unix:"):  # a local session: its dir holds the token
        session = os.path.dirname(os.path.dirname(gcs_address[5:]))
    else:
        node = local_node_for(gcs_address, temp_dir)
        session = node["session_dir"] if node else None
        try:
            secret = token_for(gcs_address, temp_dir, token)
        except ValueError as e:
            raise DashboardError(f"{e} ({TOKEN_HOWTO})") from None

    async def lookup() -> bytes | None:
        conn = await conn_mod.connect(gcs_address, name="gcs", token=secret, timeout=5.0)
        try:
            return await conn.call(
                "kv_get", {"namespace": "dashboard", "key": b"url"}, timeout=10.0
            )
        finally:
            conn.close()

    loop = conn_mod.new_event_loop()
    try:
        raw = loop.run_until_complete(lookup())
    except conn_mod.AuthenticationError as e:
        raise DashboardError(str(e)) from None
    except (OSError, TimeoutError, ConnectionError) as e:
        raise DashboardError(
            f"could not reach the cluster at {address or gcs_address} ({e}); pass --address"
        ) from None
    finally:
        loop.close()
    if not raw:
        raise DashboardError(
            f"the cluster at {gcs_address} runs no dashboard (ember.init(include_dashboard="
            "False)?); the diagnostics commands need it"
        )
    url = raw.decode() if isinstance(raw, bytes) else str(raw)
    url, note = _as_seen_from_here(url, gcs_address, session is not None)
    return url, note, session


def _as_seen_from_here(url: str, gcs_address: str, local: bool) -> tuple[str, str]:
    """The published URL names the head's loopback when its dashboard listens on every
    interface (or on loopback only); from another machine, the head is the GCS's host."""
    parts = urllib.parse.urlsplit(url)
    gcs_host = gcs_address[4:].rpartition(":")[0] if gcs_address.startswith("tcp:") else ""
    if local or not gcs_host or not is_local_only(parts.hostname or ""):
        return url, ""
    if is_local_only(gcs_host):
        return url, ""
    moved = urllib.parse.urlunsplit(parts._replace(netloc=f"{gcs_host}:{parts.port}"))
    note = (
        f"; the head publishes {url}: if its dashboard listens on loopback only, start it "
        "with --dashboard-host 0.0.0.0 (or its IP) or reach it through an SSH tunnel"
    )
    return moved, note
