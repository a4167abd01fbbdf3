"""The errors the wire raises, and the one way a handler's failure reaches its caller.

A request handler that fails raises; the exception travels back as an ``ERROR`` frame and is
raised again in the caller, as its own type when the caller can rebuild it, else as a
``RemoteError`` naming the type and message. Either way the handler's traceback text is on
the exception as ``remote_traceback``. Handlers should raise (``Refused`` for an expected
"no", a more specific type where the caller acts on it) rather than return an in-band
``{"error": ...}`` or ``{"ok": False, "reason": ...}`` body.
"""

from __future__ import annotations

from typing import Any


class ConnectionClosedError(ConnectionError):
    """The peer went away before answering."""


class AuthenticationError(ConnectionRefusedError):
    """The peer refused our cluster token (or we had none to give)."""


class RemoteError(Exception):
    """A handler failed on the other side with an error that could not travel as itself.

    ``type_name`` is the original exception's qualified type name (empty when the error is
    the wire's own, like a missing handler); ``remote_traceback`` the handler's traceback.
    """

    def __init__(self, message: str, *, type_name: str = "", remote_traceback: str = "") -> None:
        super().__init__(message)
        self.type_name = type_name
        self.remote_traceback = remote_traceback

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_remote_error,
            (type(self), self.args[0], self.type_name, self.remote_traceback),
        )


class NoHandlerError(RemoteError):
    """The peer has no handler for the op it was sent (a version or routing mistake)."""


class HandlerCancelledError(RemoteError):
    """The handler's task was cancelled before it answered (its process is shutting down)."""


class Refused(Exception):
    """A handler's deliberate "no": the request was understood and declined, for ``reason``.

    The typed replacement for in-band ``{"ok": False, "reason": ...}`` reply bodies.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _rebuild_remote_error(
    cls: type[RemoteError], message: str, type_name: str, tb: str
) -> RemoteError:
    return cls(message, type_name=type_name, remote_traceback=tb)
