"""``DeploymentHandle``: calling a deployment from Python (a driver, another replica, the proxy).

``handle.remote(...)`` picks a replica at once when one has room (``router``) and returns a
``DeploymentResponse``; when every replica is full the choice is made when the caller waits
(``.result()`` or ``await``), within the router's bounded queue. A response passed as an
argument to another ``.remote()`` travels as its object ref: the value goes from replica to
replica without passing through the caller (Ray Serve's composition).
"""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from typing import Any

import ember
import ember.serve.context as context
from ember.exceptions import ActorDiedError, GetTimeoutError
from ember.serve.exceptions import RequestTimeoutError
from ember.serve.router import Router, router_for


def _request_id() -> str:
    # a call made while handling a request carries that request's id (one id end to end)
    return context.request_context().request_id or uuid.uuid4().hex


class DeploymentHandle:
    def __init__(
        self,
        deployment_name: str,
        app_name: str,
        *,
        method_name: str = "__call__",
        stream: bool = False,
    ) -> None:
        self.deployment_name = deployment_name
        self.app_name = app_name
        self._method = method_name
        self._stream = stream

    def options(
        self,
        *,
        method_name: str | None = None,
        stream: bool | None = None,
        use_new_handle_api: bool | None = None,
        multiplexed_model_id: str | None = None,
    ) -> DeploymentHandle:
        return DeploymentHandle(
            self.deployment_name,
            self.app_name,
            method_name=self._method if method_name is None else method_name,
            stream=self._stream if stream is None else stream,
        )

    def __getattr__(self, name: str) -> DeploymentHandle:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.options(method_name=name)  # Ray: handle.method.remote(...)

    def __reduce__(self):
        return (
            _rebuild_handle,
            (self.deployment_name, self.app_name, self._method, self._stream),
        )

    def __repr__(self) -> str:
        return f"DeploymentHandle(deployment={self.deployment_name!r}, app={self.app_name!r})"

    def remote(self, *args: Any, **kwargs: Any) -> DeploymentResponse | DeploymentResponseGenerator:
        router = router_for(self.app_name, self.deployment_name)
        meta = {"method": self._method, "request_id": _request_id(), "stream": self._stream}
        cls = DeploymentResponseGenerator if self._stream else DeploymentResponse
        return cls(router, meta, args, kwargs)


def _rebuild_handle(deployment: str, app: str, method: str, stream: bool) -> DeploymentHandle:
    return DeploymentHandle(deployment, app, method_name=method, stream=stream)


def _unwrap(value: Any) -> Any:
    """A response argument becomes its object ref, so the runtime hands the value over."""
    return value._object_ref_sync() if isinstance(value, DeploymentResponse) else value


class _Call:
    """One request: sent to a replica as soon as one has room."""

    def __init__(self, router: Router, meta: dict, args: tuple, kwargs: dict) -> None:
        self._router = router
        self._meta = meta
        self._args = tuple(_unwrap(a) for a in args)
        self._kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        self._sent: Any = None
        pick = router.try_assign()
        if pick is not None:
            self._send(pick)

    def _submit(self, replica: Any) -> Any:
        raise NotImplementedError

    def _send(self, pick: tuple[str, Any]) -> None:
        replica_id, replica = pick
        try:
            self._sent = self._submit(replica)
        except BaseException:
            self._router.release(replica_id)
            raise
        done_ref = self._sent if isinstance(self._sent, ember.ObjectRef) else self._sent.completed()
        fut = done_ref.future()
        router = self._router
        fut.add_done_callback(lambda f: router.release(replica_id, died=_died(f)))
        self._args = self._kwargs = None  # type: ignore[assignment]  # sent: drop our copies

    def _sent_sync(self, timeout_s: float | None) -> Any:
        if self._sent is None:
            self._send(self._router.assign(timeout_s))
        return self._sent

    async def _sent_async(self, timeout_s: float | None = None) -> Any:
        if self._sent is None:
            pick = await self._router.assign_async(timeout_s)
            if self._sent is None:
                self._send(pick)
            else:
                self._router.release(pick[0])
        return self._sent


def _died(f: concurrent.futures.Future) -> bool:
    if f.cancelled():
        return False
    return isinstance(f.exception(), ActorDiedError)


class DeploymentResponse(_Call):
    """The answer to one call: ``.result(timeout_s=)`` or ``await``."""

    def _submit(self, replica: Any) -> Any:
        return replica.handle_request.remote(self._meta, *self._args, **self._kwargs)

    def _object_ref_sync(self, timeout_s: float | None = None) -> ember.ObjectRef:
        return self._sent_sync(timeout_s)

    async def _to_object_ref(self) -> ember.ObjectRef:
        return await self._sent_async()

    def result(self, *, timeout_s: float | None = None) -> Any:
        started = time.monotonic()
        ref = self._sent_sync(timeout_s)
        left = None if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - started))
        try:
            return ember.get(ref, timeout=left)
        except GetTimeoutError:
            raise RequestTimeoutError(
                f"the request to {self._router.name} did not finish within {timeout_s}s"
            ) from None

    def __await__(self):
        return self._await().__await__()

    async def _await(self) -> Any:
        ref = await self._sent_async()
        return await ref

    def cancel(self) -> None:
        if self._sent is not None:
            ember.cancel(self._sent)


class DeploymentResponseGenerator(_Call):
    """A streaming call's items (``.options(stream=True)``): iterate, sync or async."""

    def _submit(self, replica: Any) -> Any:
        return replica.handle_request_streaming.remote(self._meta, *self._args, **self._kwargs)

    def __iter__(self) -> DeploymentResponseGenerator:
        return self

    def __next__(self) -> Any:
        return ember.get(next(self._sent_sync(None)))

    def __aiter__(self) -> DeploymentResponseGenerator:
        return self

    async def __anext__(self) -> Any:
        gen = await self._sent_async()
        return await (await gen.__anext__())

    def cancel(self) -> None:
        if self._sent is not None:
            ember.cancel(self._sent.completed())
