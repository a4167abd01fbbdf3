"""HTTP inside a replica: the proxy's request record becomes an ASGI scope, the deployment's
answer becomes ASGI messages.

The proxy reads the whole request body (bounded) and sends a plain record; the replica runs
the ASGI app (a ``@serve.ingress`` FastAPI app) or calls the deployment with a Starlette
``Request``, and streams the response's ASGI messages back (a streaming response's chunks go
out as they are produced).
"""

from __future__ import annotations

import asyncio
import copyreg
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

Message = dict


def _pickle_state_as_its_dict() -> None:
    """A FastAPI app travels to its replicas pickled (driver -> controller -> replica); its
    ``app.state`` (Starlette's ``State``) answers every attribute lookup from a dict that does
    not exist yet while it is unpickled, which recurses without end. Pickled as its dict.
    Registered wherever this module is imported: every process that pickles an app."""
    from starlette.datastructures import State

    copyreg.pickle(State, lambda state: (State, (dict(state._state),)))


_pickle_state_as_its_dict()


def make_scope(rec: dict) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": rec.get("http_version", "1.1"),
        "method": rec["method"],
        "scheme": rec.get("scheme", "http"),
        "path": rec["path"],
        "raw_path": rec["path"].encode(),
        "query_string": rec.get("query_string", b""),
        "root_path": rec.get("root_path", ""),
        "headers": [(bytes(k), bytes(v)) for k, v in rec.get("headers", ())],
        "client": tuple(rec["client"]) if rec.get("client") else None,
        "server": tuple(rec["server"]) if rec.get("server") else None,
        "state": {},
    }


def body_receiver(body: bytes) -> Callable:
    """ASGI ``receive``: the whole body once, then (when asked again) wait for a disconnect
    that the app's own cancellation ends (Starlette listens for it while streaming)."""
    sent = False
    never = asyncio.Event()

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    return receive


def messages_for(obj: Any, status: int = 200) -> list[Message]:
    """A plain return value as Ray Serve answers it: str/bytes as text, anything else JSON."""
    if obj is None:
        body, ctype = b"", b"text/plain"
    elif isinstance(obj, bytes):
        body, ctype = obj, b"text/plain"
    elif isinstance(obj, str):
        body, ctype = obj.encode(), b"text/plain; charset=utf-8"
    else:
        from fastapi.encoders import jsonable_encoder

        body = json.dumps(jsonable_encoder(obj), separators=(",", ":")).encode()
        ctype = b"application/json"
    return [
        {"type": "http.response.start", "status": status, "headers": [[b"content-type", ctype]]},
        {"type": "http.response.body", "body": body, "more_body": False},
    ]


def error_messages(status: int, text: str) -> list[Message]:
    return messages_for(text, status)


async def run_asgi(app: Callable, scope: dict, body: bytes) -> AsyncIterator[Message]:
    """Runs an ASGI app on one request, yielding its messages as it sends them."""
    queue: asyncio.Queue = asyncio.Queue()

    async def send(message: Message) -> None:
        await queue.put(message)

    async def run() -> None:
        try:
            await app(scope, body_receiver(body), send)
        finally:
            await queue.put(None)

    task = asyncio.get_running_loop().create_task(run())
    try:
        while True:
            message = await queue.get()
            if message is None:
                break
            yield message
        await task  # its error, if any, after what it sent
    finally:
        if not task.done():
            task.cancel()


async def call_with_request(
    call: Callable[[Request], Any], scope: dict, body: bytes
) -> AsyncIterator[Message]:
    """Calls a function/class deployment with a Starlette Request; yields the answer's ASGI
    messages (a Starlette Response returned is itself run as an ASGI app)."""
    request = Request(scope, body_receiver(body))
    result = await call(request)
    if isinstance(result, Response):
        async for m in run_asgi(result, scope, b""):
            yield m
        return
    for m in messages_for(result):
        yield m


def bind_class_routes(app: Any, cls: type, instance: Any) -> Any:
    """``@serve.ingress`` on a class: the FastAPI routes whose endpoints are the class's
    methods are re-made with the replica's bound methods, so FastAPI sees their parameters
    without ``self`` (Ray's class-based views)."""
    from fastapi import FastAPI
    from fastapi.routing import APIRoute

    if not isinstance(app, FastAPI):
        return app  # a plain ASGI app: served as it is
    methods = {v: k for k, v in _class_functions(cls).items()}
    routes = app.router.routes
    for i, route in enumerate(list(routes)):
        if isinstance(route, APIRoute) and route.endpoint in methods:
            bound = getattr(instance, methods[route.endpoint])
            routes[i] = APIRoute(
                route.path,
                bound,
                methods=route.methods,
                name=route.name,
                status_code=route.status_code,
                response_model=route.response_model,
                response_class=route.response_class,
                dependencies=route.dependencies,
                tags=route.tags,
                summary=route.summary,
                include_in_schema=route.include_in_schema,
            )
    return app


def _class_functions(cls: type) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if callable(value):
                found[name] = value
    return found
