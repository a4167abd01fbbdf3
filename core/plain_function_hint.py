"""``.remote`` on a plain function: a ``TypeError`` that says to decorate it.

Python raises ``AttributeError: 'function' object has no attribute 'remote'`` there, which
does not say what to do. Ember gives the function type a ``remote`` attribute that only
raises ``RemoteUsageError``: a ``TypeError`` naming the fix, and also an ``AttributeError``,
so ``hasattr(f, "remote")`` stays false and ``getattr(f, "remote", None)`` stays ``None``.

A function type's attributes are read-only from Python, so the descriptor goes into the
type's dict through the dict object itself (CPython), then the type's attribute cache is
invalidated. It is a non-data descriptor: a function that sets its own ``remote`` attribute
keeps it. ``dir()`` of a function leaves the name out, as before, since code that walks
``dir()`` and reads each attribute (Hypothesis copying a test function's attributes does)
must not meet it. Where this is not CPython, nothing is installed and Python's own error
stands.
"""

from __future__ import annotations

import ctypes
import gc
import types
from typing import Any

from ember.exceptions import RemoteUsageError


class _RemoteOnPlainFunction:
    """The ``remote`` attribute of every plain function: raises what to write instead."""

    def __get__(self, function: Any, owner: type | None = None) -> Any:
        if function is None:
            raise AttributeError("remote")
        name = getattr(function, "__name__", "f")
        raise RemoteUsageError(
            f"'{getattr(function, '__qualname__', name)}' is a plain function, not a remote "
            f"one: decorate it with @ember.remote (or wrap it: {name}_remote = "
            f"ember.remote({name})), then call {name}.remote(...)",
            "remote",
            function,
        )


def _function_dir(function: Any) -> list[str]:
    """``dir()`` of a function without the hint: what it listed before Ember was imported."""
    own = getattr(function, "__dict__", {})
    return [name for name in object.__dir__(function) if name != "remote" or name in own]


def install() -> bool:
    """Give ``types.FunctionType`` the ``remote`` hint; True when it is in place."""
    type_dict = types.FunctionType.__dict__
    if isinstance(type_dict.get("remote"), _RemoteOnPlainFunction):
        return True
    referents = [r for r in gc.get_referents(type_dict) if isinstance(r, dict)]
    pythonapi = getattr(ctypes, "pythonapi", None)
    if len(referents) != 1 or pythonapi is None or {"remote", "__dir__"} & referents[0].keys():
        return False
    referents[0]["remote"] = _RemoteOnPlainFunction()
    referents[0]["__dir__"] = _function_dir
    pythonapi.PyType_Modified(ctypes.py_object(types.FunctionType))
    return True
