"""``ember dashboard --history PATH``: the dashboard app, read-only, over stopped sessions'
history (``history_reader``).

PATH is a session directory, an archive of one (``ember archive``: extracted safely into a
private temporary directory removed at exit, ``history_archive``), or a directory holding
several ``session_*`` directories and/or archives. Each session is served by its own instance of the dashboard's app at ``/sessions/<name>/`` (the
browser app's URLs are relative, so it works there unchanged); ``GET /api/sessions`` lists
them and ``/`` links to them. An API path at the root answers from ``?session=<name>``, or
the newest session. Every method but GET/HEAD/OPTIONS is refused with 405 saying that this is
history; ``/api/version`` says ``"history": true`` and when the session stopped, and the
browser app shows it as a banner. A session is replayed on its first request (in a thread)
and at most ``EMBER_HISTORY_MAX_SESSIONS`` (4) are kept in memory: opening another evicts
the least recently used, which is replayed again when next asked for.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import os
import secrets
import shutil
import signal
import tempfile
from collections import OrderedDict
from typing import Any
from urllib.parse import parse_qs, quote

from ember.dashboard import history_archive as ha
from ember.dashboard import history_reader as hr
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.routes.frontend import default_frontend_dir
from ember.launch import bind_port, dashboard_url
from ember.listen_rules import rule_for

logger = logging.getLogger("ember.dashboard")
MAX_LOADED_ENV = "EMBER_HISTORY_MAX_SESSIONS"
UNPACK_PREFIX = "ember-history-"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
TOKEN_PLACE = "printed by `ember dashboard --history` when it started (or its --token)"


class ReadOnly:
    """Refuses every method that would change something, naming the session."""

    def __init__(self, app: Any, session: hr.Session) -> None:
        self.app = app
        self.session = session

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] not in READ_METHODS:
            message = (
                f"{scope['method']} {scope['path']} refused: this dashboard shows the history "
                f"of session {self.session.name}, which stopped; nothing can be killed, "
                "stopped, submitted or deleted in it"
            )
            await _send_json(send, 405, {"detail": message}, [(b"allow", b"GET, HEAD")])
            return
        await self.app(scope, receive, send)


def session_app(session: hr.Session, token: str | None) -> Any:
    ctx = DashboardContext(
        state=session.state,
        hub=hr.HistoryHub(session),
        gcs=None,
        session_dir=session.session_dir,
        frontend_dir=default_frontend_dir(),
    )
    ctx.extra["jobs"] = hr.HistoryJobs(session)
    ctx.extra["history"] = session.summary()
    return ReadOnly(create_app(ctx, token, TOKEN_PLACE), session)


class HistoryServer:
    """The ASGI app over several sessions (see the module's docstring)."""

    def __init__(
        self, session_dirs: list[str], token: str | None = None, max_loaded: int | None = None
    ) -> None:
        self.dirs: dict[str, str] = {}
        for d in session_dirs:
            # The same session twice (its directory and an archive of it): both, told apart.
            base = name = os.path.basename(d.rstrip("/"))
            n = 2
            while name in self.dirs:
                name, n = f"{base}~{n}", n + 1
            self.dirs[name] = d
        self.newest = name
        self.single = len(session_dirs) == 1
        self.token = token
        self.max_loaded = max_loaded or _max_loaded()
        self.apps: OrderedDict[str, Any] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    async def app_for(self, name: str) -> Any:
        app = self.apps.get(name)
        if app is not None:
            self.apps.move_to_end(name)
            return app
        async with self._locks.setdefault(name, asyncio.Lock()):
            if name not in self.apps:
                session = await asyncio.to_thread(hr.load, self.dirs[name])
                logger.info(
                    "replayed %s: %d records (%d skipped)",
                    name,
                    session.records,
                    session.skipped,
                )
                self.apps[name] = session_app(session, self.token)
                while len(self.apps) > self.max_loaded:  # the least recently used goes
                    evicted, _ = self.apps.popitem(last=False)
                    logger.info("%s evicted (at most %d kept)", evicted, self.max_loaded)
            return self.apps[name]

    def sessions(self) -> list[dict[str, Any]]:
        return [
            {
                "session_name": name,
                "session_dir": d,
                "url": f"sessions/{quote(name)}/",
                "loaded": name in self.apps,
            }
            for name, d in self.dirs.items()
        ]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # nothing to start or stop: say so
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        path = scope["path"]
        if path.rstrip("/") == "/api/sessions" and scope["type"] == "http":
            if not await self._token_ok(scope, send):
                return
            await _send_json(send, 200, {"sessions": self.sessions(), "newest": self.newest})
            return
        if path.startswith("/sessions/"):
            name, _, rest = path[len("/sessions/") :].partition("/")
            if name not in self.dirs:
                await _send_json(send, 404, {"detail": self._unknown(name)})
                return
            if not rest and not path.endswith("/"):
                # The browser app's relative URLs need the slash.
                await _redirect(send, f"{name}/")
                return
            prefix = f"/sessions/{name}"
            scope = dict(scope, path="/" + rest, root_path=scope.get("root_path", "") + prefix)
            await (await self.app_for(name))(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        name = (query.get("session") or [None])[0]
        if name is not None and name not in self.dirs:
            await _send_json(send, 404, {"detail": self._unknown(name)})
            return
        if path == "/" and scope["type"] == "http" and not self.single:
            if name:
                await _redirect(send, f"sessions/{quote(name)}/")
            else:
                await self._index(scope, send)
            return
        await (await self.app_for(name or self.newest))(scope, receive, send)

    def _unknown(self, name: str) -> str:
        return f"no session {name!r} here; GET /api/sessions lists them ({', '.join(self.dirs)})"

    async def _token_ok(self, scope: Any, send: Any) -> bool:
        if self.token is None:
            return True
        headers = dict(scope.get("headers") or ())
        auth = headers.get(b"authorization", b"").decode("latin-1")
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = auth.removeprefix("Bearer ").strip() or (query.get("token") or [""])[0]
        if secrets.compare_digest(given.encode(), self.token.encode()):
            return True
        await _send_json(
            send, 401, {"detail": f"this history server needs its token, {TOKEN_PLACE}"}
        )
        return False

    async def _index(self, scope: Any, send: Any) -> None:
        if not await self._token_ok(scope, send):
            return
        items = "".join(
            f'<li><a href="{html.escape(s["url"])}">{html.escape(s["session_name"])}</a></li>'
            for s in reversed(self.sessions())
        )
        body = (
            "<!doctype html><title>Ember history</title><h1>Ember history</h1>"
            f"<p>Stopped sessions, newest first:</p><ul>{items}</ul>"
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/html; charset=utf-8")],
            }
        )
        await send({"type": "http.response.body", "body": body})


async def _send_json(send: Any, status: int, body: Any, headers: list | None = None) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def _redirect(send: Any, location: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 307,
            "headers": [(b"location", location.encode())],
        }
    )
    await send({"type": "http.response.body", "body": b""})


def _max_loaded() -> int:
    raw = os.environ.get(MAX_LOADED_ENV, "4")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{MAX_LOADED_ENV}={raw!r}: give how many sessions to keep loaded (>= 1)")
    return n


def open_path(path: str, unpack_dir: str) -> list[str]:
    """The session directories ``path`` names, oldest first: a session directory, an
    archive (extracted under ``unpack_dir``), or a directory of sessions and archives.
    NoHistory or ``ha.ArchiveError`` saying what is wrong."""
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.isfile(path):
        if not ha.is_archive(path):
            raise hr.NoHistory(
                f"{path} is a file but not an archive: give a .tar.gz made by `ember archive`, "
                "a session directory or a directory of them"
            )
        archives = [path]
        dirs: list[str] = []
    else:
        if os.path.isdir(path) and hr.has_history(path):
            return [path]
        archives = [
            os.path.join(path, n)
            for n in (sorted(os.listdir(path)) if os.path.isdir(path) else [])
            if not os.path.islink(os.path.join(path, n)) and ha.is_archive(os.path.join(path, n))
        ]
        try:
            dirs = hr.find_sessions(path)
        except hr.NoHistory:
            if not archives:
                raise
            dirs = []
    budget = ha.Budget()
    for i, archive in enumerate(archives):
        dest = os.path.join(unpack_dir, str(i))
        os.mkdir(dest, 0o700)
        session = ha.extract(archive, dest, budget)
        if not hr.has_history(session):
            raise hr.NoHistory(
                f"{archive} holds session {os.path.basename(session)} but no history in it "
                "(its cluster ran with EMBER_HISTORY=0)"
            )
        dirs.append(session)
    # Session names start with their start time: oldest first, wherever each came from.
    return sorted(dirs, key=lambda d: os.path.basename(d.rstrip("/")))


def _remove_stale_unpack_dirs() -> None:
    """Removes the extracted archives of this user's history servers that were killed
    before they could remove them (their pid is gone)."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        pid = name[len(UNPACK_PREFIX) :].split("-", 1)[0]
        path = os.path.join(root, name)
        if not name.startswith(UNPACK_PREFIX) or not pid.isdigit():
            continue
        try:
            if os.lstat(path).st_uid != os.getuid() or os.path.islink(path):
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def serve(path: str, host: str, port: int, token: str | None, announce: Any = print) -> None:
    """Serves until SIGTERM or SIGINT. Off loopback a token is required: ``token``, else
    ``EMBER_TOKEN``, else a new one, announced with the URL. Archives are extracted into a
    private temporary directory, removed when it returns."""
    _remove_stale_unpack_dirs()
    # Mode 0700; named with this pid, so that one a killed server left is recognised.
    unpack_dir = tempfile.mkdtemp(prefix=f"{UNPACK_PREFIX}{os.getpid()}-")
    try:
        _serve(open_path(path, unpack_dir), host, port, token, announce)
    finally:
        shutil.rmtree(unpack_dir, ignore_errors=True)


def _serve(dirs: list[str], host: str, port: int, token: str | None, announce: Any) -> None:
    import uvicorn

    if token is None and rule_for(host, cluster=False).token_required:
        token = os.environ.get("EMBER_TOKEN") or secrets.token_urlsafe(24)
        announce(f"token: {token}")
    sock, bound = bind_port(host, port)
    app = HistoryServer(dirs, token)
    url = dashboard_url(host, bound, "")
    names = ", ".join(os.path.basename(d) for d in dirs)
    announce(f"Ember history of {len(dirs)} session(s) ({names}) at {url}")

    async def run() -> None:
        # A browser's open event stream must not hold the exit up.
        config = uvicorn.Config(
            app,
            loop="asyncio",
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=3,
        )
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
        await server.serve(sockets=[sock])

    asyncio.run(run())
