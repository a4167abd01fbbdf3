"""What the running code is running: the task or call whose id and name
``get_runtime_context()`` reports and whose id tasks submitted from it carry as parent.

A thread runs one task at a time, so a plain task or a threaded actor's call sets its fields
on this thread-local. An async actor runs many calls at once on one event-loop thread, so
each call's fields live in a context variable instead (each asyncio task has its own copy of
the context); a field the thread does not hold is looked up there. Reading a thread's own
field costs nothing extra: ``__getattr__`` runs only for a missing one.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

# {field: value} of the async call the current asyncio task runs; None outside one.
_ASYNC_CALL: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "ember_async_call", default=None
)


class CurrentTask(threading.local):
    """The fields ``.task_id``, ``.spec``, ``.is_actor``, ``.actor_id``, ``.profile_spans``
    (and the submission bookkeeping of the task manager)."""

    def __getattr__(self, name: str) -> Any:
        call = _ASYNC_CALL.get()
        if call is not None and name in call:
            return call[name]
        raise AttributeError(name)


def enter_async_call(fields: dict[str, Any]) -> contextvars.Token:
    """Inside an asyncio task: its async call's fields, until ``leave_async_call``."""
    return _ASYNC_CALL.set(fields)


def leave_async_call(token: contextvars.Token) -> None:
    _ASYNC_CALL.reset(token)
