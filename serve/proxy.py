"""The HTTP proxy: an actor on each node (which nodes: the controller's ``proxy_location``)
running uvicorn (port 8000 unless ``http_options`` say otherwise, loopback unless told) that
routes each request by the longest matching route prefix to its
application's ingress deployment.

Bounded everywhere: the body is read up to ``max_body_bytes`` (413 past it); a request that
finds every replica full waits in the router's bounded queue, then gets a 503 naming the
deployment; ``request_timeout_s`` gives a 408; a replica that dies mid-request gives a 500 that
says so. Every request carries an ``X-Request-ID`` (the client's, or a new one), sent to the
replica (its log lines carry it) and returned in the response.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
import uuid
from typing import Any

import uvicorn
from ember.exceptions import ActorDiedError
from ember.serve.client import routing_client
from ember.serve.exceptions import BackPressureError, DeploymentUnavailableError
from ember.serve.handle import _Call
from ember.serve.request_metrics import RequestStats
from ember.serve.router import router_for

logger = logging.getLogger("ember.serve")
READY_TIMEOUT_S = 30.0
BIND_RETRY_FIRST_S = 0.5  # then doubling, to BIND_RETRY_MAX_S
BIND_RETRY_MAX_S = 5.0


class _HttpCall(_Call):
    def _submit(self, replica: Any) -> Any:
        return replica.handle_http.remote(self._meta, *self._args)


async def _respond(send: Any, status: int, text: str, request_id: str = "") -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    if request_id:
        headers.append((b"x-request-id", request_id.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": text.encode(), "more_body": False})


def match_route(routes: dict[str, Any], path: str) -> str | None:
    """The longest route prefix that ``path`` is under (``/a`` matches ``/a`` and ``/a/b``,
    not ``/ab``)."""
    best = None
    for prefix in routes:
        base = prefix.rstrip("/")
        if path == prefix or prefix == "/" or path.startswith(base + "/"):
            if best is None or len(prefix) > len(best):
                best = prefix
    return best


class ProxyActor:
    def __init__(self, http_options: dict) -> None:
        self.options = http_options
        self.client = routing_client()
        self.max_body = int(http_options.get("max_body_bytes") or 10 * 1024 * 1024)
        self.timeout_s = http_options.get("request_timeout_s")
        self.stats = RequestStats()  # per route prefix; the controller collects it
        self.config = uvicorn.Config(
            self._app,
            host=http_options.get("host", "127.0.0.1"),
            port=int(http_options.get("port", 8000)),
            log_level="warning",
            access_log=False,
            lifespan="off",
            interface="asgi3",
            timeout_keep_alive=int(http_options.get("keep_alive_timeout_s", 5)),
        )
        self.server = uvicorn.Server(self.config)
        self.bind_error: str | None = None  # why the last attempt to listen failed
        self.stopping = False
        self.serving = asyncio.get_event_loop().create_task(self._serve())

    async def _serve(self) -> None:
        """Serves until stopped. A port that cannot be taken (another process holds it) is
        tried again with a growing pause, as Ray restarts an unhealthy proxy: the node gets
        its proxy once the port is free, and meanwhile ``ready`` says why it has none."""
        pause = BIND_RETRY_FIRST_S
        while not self.stopping:
            self.server = uvicorn.Server(self.config)
            try:
                await self.server.serve()
            except (SystemExit, OSError) as e:  # uvicorn exits when it cannot bind
                if self.server.started:
                    raise
                self.bind_error = str(e) if isinstance(e, OSError) else self._why_not_listening()
            if self.server.started or self.stopping:
                return
            self.bind_error = self.bind_error or "the server exited before it listened"
            await asyncio.sleep(pause)
            pause = min(pause * 2, BIND_RETRY_MAX_S)
            self.bind_error = None  # a new attempt: ``ready`` waits for its outcome

    def _why_not_listening(self) -> str:
        """uvicorn logs why it could not bind and exits; the same bind, tried here, names it."""
        family = socket.AF_INET6 if ":" in self.config.host else socket.AF_INET
        try:
            with socket.socket(family) as probe:
                probe.bind((self.config.host, self.config.port))
        except OSError as e:
            return str(e)
        return "the server exited before it listened"

    async def ready(self) -> dict:
        """Returns once the server listens; raises while it cannot (e.g. the port is taken,
        tried again in the background: a later call may return)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.server.started:
            if self.serving.done():
                error = None if self.serving.cancelled() else self.serving.exception()
                raise RuntimeError(
                    f"the Serve HTTP proxy on {self.options.get('host')}:"
                    f"{self.options.get('port')} stopped: {error or 'it was told to'}"
                )
            if self.bind_error is not None:
                raise RuntimeError(
                    f"the Serve HTTP proxy could not listen on {self.options.get('host')}:"
                    f"{self.options.get('port')}: {self.bind_error}; it tries again until "
                    "the port is free"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Serve HTTP proxy did not start within {READY_TIMEOUT_S}s")
            await asyncio.sleep(0.02)
        return {"host": self.options.get("host"), "port": self.options.get("port")}

    def routing_epoch(self) -> int:
        return self.client.epoch

    def request_metrics(self) -> dict:
        return self.stats.snapshot()

    async def stop(self) -> None:
        self.stopping = True
        self.server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self.serving), 5.0)
        except Exception:
            pass

    async def _read_body(self, scope: dict, receive: Any) -> bytes | None:
        """The whole body, or None when it is larger than the bound."""
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body:
                return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        return b"".join(chunks)

    async def _app(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return  # websockets: not served (uvicorn closes the connection)
        path = scope["path"]
        routes = self.client.snapshot["routes"]
        if path == "/-/healthz":
            return await _respond(send, 200, "success")
        if path == "/-/routes":
            body = json.dumps({p: r["app"] for p, r in routes.items()})
            return await _respond(send, 200, body)
        prefix = match_route(routes, path)
        if prefix is None:
            return await _respond(
                send,
                404,
                f"Path '{path}' not found. Ping http://.../-/routes for available routes.",
            )
        request_id = ""
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                request_id = value.decode("latin-1")[:128]
        request_id = request_id or uuid.uuid4().hex
        body = await self._read_body(scope, receive)
        if body is None:
            return await _respond(
                send,
                413,
                f"request body larger than the limit of {self.max_body} bytes (http_options max_body_bytes)",
                request_id,
            )
        route = routes[prefix]
        rec = {
            "method": scope["method"],
            "path": path,
            "query_string": scope.get("query_string", b""),
            "root_path": "" if prefix == "/" else prefix.rstrip("/"),
            "headers": [list(h) for h in scope.get("headers", ())],
            "client": scope.get("client"),
            "server": scope.get("server"),
            "scheme": scope.get("scheme", "http"),
            "http_version": scope.get("http_version", "1.1"),
            "body": body,
        }
        meta = {"method": "__call__", "request_id": request_id, "route": prefix}
        started = time.perf_counter()
        sent: dict = {}

        async def send_noting_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                sent["status"] = message["status"]
            await send(message)

        try:
            if self.timeout_s:
                async with asyncio.timeout(self.timeout_s):
                    await self._forward(route, meta, rec, send_noting_status, request_id)
            else:
                await self._forward(route, meta, rec, send_noting_status, request_id)
        except TimeoutError:
            if not meta.get("started"):
                await _respond(
                    send_noting_status,
                    408,
                    f"request timed out after {self.timeout_s}s (http_options request_timeout_s)",
                    request_id,
                )
        finally:
            status = sent.get("status", 500)
            ms = (time.perf_counter() - started) * 1000
            self.stats.record(prefix, route["app"], ms, status >= 400, scope["method"], status)

    async def _forward(
        self, route: dict, meta: dict, rec: dict, send: Any, request_id: str
    ) -> None:
        router = router_for(route["app"], route["ingress"])
        try:
            call = _HttpCall(router, meta, (rec,), {})
            gen = await call._sent_async(self.timeout_s)
        except (BackPressureError, DeploymentUnavailableError) as e:
            return await _respond(send, 503, str(e), request_id)
        try:
            async for ref in gen:
                message = await ref
                if message["type"] == "http.response.start":
                    message = dict(
                        message,
                        headers=[
                            *message.get("headers", ()),
                            (b"x-request-id", request_id.encode()),
                        ],
                    )
                    meta["started"] = True
                await send(message)
        except ActorDiedError as e:
            if not meta.get("started"):
                await _respond(
                    send, 500, f"the replica handling this request died: {e}", request_id
                )
        except Exception as e:  # the replica's failure, as a 500 saying what it was
            if not meta.get("started"):
                await _respond(
                    send, 500, f"Internal Server Error: {type(e).__name__}: {e}", request_id
                )
