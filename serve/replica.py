"""The replica actor: one copy of a deployment's function or class, serving its requests.

It counts its ongoing requests (the controller's autoscaling reads them, the router avoids a
full replica) and lets at most ``max_ongoing_requests`` run at once; it answers handle calls
(plain and streaming) and HTTP requests from the proxy; applies ``user_config`` through the
user's ``reconfigure`` without a restart; runs the user's ``check_health``; and drains before
it is stopped (no new request for ``graceful_shutdown_wait_loop_s`` and none running, or
``graceful_shutdown_timeout_s``). Sync user methods run in a thread, so a slow one does not
hold up the replica's other requests or its health checks.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import sys
import time
import traceback
from typing import Any

import ember
import ember.serve.context as context
from ember.serve.config import DeploymentConfig
from ember.serve.http_util import (
    bind_class_routes,
    call_with_request,
    error_messages,
    make_scope,
    run_asgi,
)
from ember.serve.request_metrics import RequestStats

logger = logging.getLogger("ember.serve")
ASGI_ATTR = "__ember_serve_asgi_app__"  # set by @serve.ingress


def _setup_logging(replica_tag: str) -> None:
    """Replica logs go to the worker's stderr (its log file), each line with the request id."""
    fmt = logging.Formatter("%(levelname)s %(asctime)s %(name)s %(message)s")
    id_filter = context.RequestIdFilter(replica_tag)
    for name in ("ember.serve", "ray.serve"):
        lg = logging.getLogger(name)
        if not any(isinstance(f, context.RequestIdFilter) for h in lg.handlers for f in h.filters):
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(fmt)
            handler.addFilter(id_filter)
            lg.addHandler(handler)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    for handler in logging.getLogger().handlers:  # the user's own loggers, via the root
        handler.addFilter(id_filter)


async def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        result = fn(*args, **kwargs)
    else:
        result = await asyncio.to_thread(fn, *args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


class Replica:
    def __init__(
        self,
        app: str,
        deployment: str,
        replica_tag: str,
        target: Any,
        init_args: tuple,
        init_kwargs: dict,
        config: DeploymentConfig,
    ) -> None:
        self.app = app
        self.deployment = deployment
        self.tag = replica_tag
        self.target = target
        self.init_args = init_args
        self.init_kwargs = init_kwargs
        self.config = config
        self.callable: Any = None
        self.asgi: Any = None
        self.ongoing = 0
        self.handled = 0
        self.stats = RequestStats()  # per route; the controller collects it
        self.last_arrival = time.monotonic()
        self.slots = asyncio.Semaphore(config.max_ongoing_requests)
        self.ready = asyncio.Event()
        self.ready_info: dict | BaseException = RuntimeError("not initialized")
        _setup_logging(replica_tag)

    # -- lifecycle -------------------------------------------------------------------------
    async def initialize(self) -> dict:
        """Builds the user's object (the deployment is ready when this returns)."""
        try:
            self.ready_info = await self._initialize()
        except BaseException as e:
            self.ready_info = e
            raise
        finally:
            self.ready.set()
        return self.ready_info

    async def wait_ready(self) -> dict:
        """``initialize``'s outcome, for a restarted controller that did not start us."""
        await self.ready.wait()
        if isinstance(self.ready_info, BaseException):
            raise self.ready_info
        return self.ready_info

    async def _initialize(self) -> dict:
        context.set_replica_context(
            context.ReplicaContext(self.app, self.deployment, self.tag, None)
        )
        if inspect.isclass(self.target):
            # on the replica's loop (not a thread): a constructor may set up asyncio things
            self.callable = self.target(*self.init_args, **self.init_kwargs)
            asgi = getattr(self.target, ASGI_ATTR, None)
            if asgi is not None:
                self.asgi = bind_class_routes(asgi, self.target, self.callable)
        else:
            self.callable = self.target
        context.set_replica_context(
            context.ReplicaContext(self.app, self.deployment, self.tag, self.callable)
        )
        if self.config.user_config is not None:
            await self.reconfigure(self.config.user_config)
        logger.info("replica %s of %s ready (pid %d)", self.tag, self.deployment, os.getpid())
        return {
            "node_id": ember.get_runtime_context().get_node_id(),
            "actor_id": ember.get_runtime_context().get_actor_id(),
            "pid": os.getpid(),
        }

    async def reconfigure(self, user_config: Any, max_ongoing_requests: int | None = None) -> None:
        if (
            max_ongoing_requests is not None
            and max_ongoing_requests != self.config.max_ongoing_requests
        ):
            # new requests see the new limit; the running ones keep their slots
            self.config = self.config.replaced(max_ongoing_requests=max_ongoing_requests)
            self.slots = asyncio.Semaphore(max_ongoing_requests)
        if user_config is None:
            return
        fn = getattr(self.callable, "reconfigure", None)
        if fn is None:
            raise TypeError(
                f"deployment {self.deployment!r} has a user_config but its class defines no "
                "reconfigure(self, config) method to receive it"
            )
        await _call(fn, user_config)
        self.config = self.config.replaced(user_config=user_config)

    async def check_health(self) -> bool:
        fn = getattr(self.callable, "check_health", None)
        if fn is not None:
            await _call(fn)
        return True

    def get_num_ongoing_requests(self) -> int:
        return self.ongoing

    def request_metrics(self) -> dict:
        return {"ongoing": self.ongoing, "routes": self.stats.snapshot()}

    async def prepare_for_shutdown(self, wait_loop_s: float, timeout_s: float) -> int:
        """Waits until no request arrived for ``wait_loop_s`` and none runs (or the timeout:
        the ones still running then fail); runs the user's ``__del__``. Returns how many were
        still running."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            quiet = time.monotonic() - self.last_arrival >= wait_loop_s
            if self.ongoing == 0 and quiet:
                break
            await asyncio.sleep(0.02)
        left = self.ongoing
        fn = getattr(type(self.callable), "__del__", None) if self.callable is not None else None
        if fn is not None:
            try:
                await _call(fn, self.callable)
            except Exception:
                logger.exception("the deployment's __del__ raised")
        return left

    # -- requests --------------------------------------------------------------------------
    def _method(self, name: str) -> Any:
        if not inspect.isclass(self.target):
            return self.callable  # a function deployment: its only "method"
        fn = getattr(self.callable, name, None)
        if fn is None or not callable(fn):
            raise AttributeError(
                f"deployment {self.deployment!r} has no method {name!r}; "
                "use handle.options(method_name=...) with one of its methods"
            )
        return fn

    async def _enter(self, meta: dict) -> Any:
        self.last_arrival = time.monotonic()
        self.ongoing += 1
        slots = self.slots  # released to the same semaphore even if reconfigure replaced it
        await slots.acquire()
        token = context.set_request_context(
            context.RequestContext(meta.get("request_id", ""), meta.get("route", ""), self.app)
        )
        return token, slots, time.perf_counter(), meta.get("route") or meta["method"]

    def _leave(self, entered: Any, error: bool = False) -> None:
        token, slots, started, route = entered
        context.reset_request_context(token)
        slots.release()
        self.ongoing -= 1
        self.handled += 1
        self.stats.record(route, self.app, (time.perf_counter() - started) * 1000, error)

    async def handle_request(self, meta: dict, *args: Any, **kwargs: Any) -> Any:
        token = await self._enter(meta)
        error = True
        try:
            result = await _call(self._method(meta["method"]), *args, **kwargs)
            error = False
            return result
        finally:
            self._leave(token, error)

    @ember.method(num_returns="streaming")
    async def handle_request_streaming(self, meta: dict, *args: Any, **kwargs: Any) -> Any:
        token = await self._enter(meta)
        error = True
        try:
            fn = self._method(meta["method"])
            if inspect.isasyncgenfunction(fn):
                async for item in fn(*args, **kwargs):
                    yield item
                return
            result = await _call(fn, *args, **kwargs)
            if inspect.isgenerator(result):
                done = object()
                while (item := await asyncio.to_thread(next, result, done)) is not done:
                    yield item
            elif inspect.isasyncgen(result):
                async for item in result:
                    yield item
            else:
                raise TypeError(
                    f"{self.deployment}.{meta['method']} was called with stream=True but is "
                    f"not a generator (it returned a {type(result).__name__})"
                )
            error = False
        finally:
            self._leave(token, error)

    @ember.method(num_returns="streaming")
    async def handle_http(self, meta: dict, rec: dict) -> Any:
        """One HTTP request from the proxy: yields its ASGI response messages."""
        token = await self._enter(meta)
        started = time.monotonic()
        status = 500
        sent_start = False
        try:
            scope = make_scope(rec)
            if self.asgi is not None:
                messages = run_asgi(self.asgi, scope, rec["body"])
            else:
                fn = self._method("__call__")
                messages = call_with_request(lambda r: _call(fn, r), scope, rec["body"])
            try:
                async for m in messages:
                    if m["type"] == "http.response.start":
                        status, sent_start = m["status"], True
                    yield m
            except Exception as e:
                logger.error("request failed: %s", traceback.format_exc())
                if not sent_start:  # nothing sent yet: the error is the answer
                    for m in error_messages(500, f"Internal Server Error: {type(e).__name__}: {e}"):
                        yield m
        finally:
            logger.info(
                "%s %s %d %.1fms",
                rec["method"],
                rec["path"],
                status,
                (time.monotonic() - started) * 1000,
            )
            self._leave(token, status >= 500)
