"""What the running code is running: the task or call whose id and name
``get_runtime_context()`` reports and whose id tasks submitted from it carry as parent.

A thread runs one task at a time, so a plain task or a threaded actor's call sets its fields
on this thread-local. An async actor runs many calls at once on one event-loop thread, so
each call's fields live in a context variable instead (each asyncio task has its own copy of
the context); a field the thread does not hold is looked up there.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

# {field: value} of the async call the current asyncio task runs; None outside one.
_ASYNC_CALL: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "ember_async_call", default=None
)


_UNSET = object()


class _Field:
    """One field of ``CurrentTask``: the thread's own value if it set one, else the running
    async call's, else the default. A data descriptor, so reading a field no thread set
    (every submit from a driver asks for the current task id) raises and catches nothing:
    a lookup through ``__getattr__`` would cost an AttributeError each time."""

    __slots__ = ("name", "default")

    def __init__(self, default: Any = None) -> None:
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__.get(self.name, _UNSET)  # this thread's own dict
        if value is not _UNSET:
            return value
        call = _ASYNC_CALL.get()
        return self.default if call is None else call.get(self.name, self.default)

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.name] = value


class CurrentTask(threading.local):
    """The fields the running code reads: what it runs, and the task manager's submission
    bookkeeping. Each reads ``None`` (``is_actor``: False) when nothing set it."""

    task_id = _Field()
    spec = _Field()
    is_actor = _Field(False)
    actor_id = _Field()
    profile_spans = _Field()
    submission_holds = _Field()


def enter_async_call(fields: dict[str, Any]) -> contextvars.Token:
    """Inside an asyncio task: its async call's fields, until ``leave_async_call``."""
    return _ASYNC_CALL.set(fields)


def leave_async_call(token: contextvars.Token) -> None:
    _ASYNC_CALL.reset(token)
