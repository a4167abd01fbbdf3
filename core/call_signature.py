"""A call's arguments checked against the callee's parameters at ``.remote()``, as Ray does: a
call that could never bind (a missing argument, one too many, an unknown keyword) is a
``TypeError`` in the caller at once, not a task error at ``get`` or, for a constructor, an
actor dead on arrival.

The parameters travel as plain data (``params``: ``(name, kind, has_default)`` each), since an
actor's method table goes wherever its handles do; ``arity`` is the common case's shortcut
(positional arguments only, their count within ``[least, most]``), so a call that matches it
costs two comparisons. Anything else is bound against a signature rebuilt from ``params``,
whose ``TypeError`` words are Python's own."""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_NO_SHORTCUT = (sys.maxsize, -1)  # no count of positional arguments alone is known to bind

Params = tuple[tuple[str, int, bool], ...]


def params_of(fn: Any, drop_first: bool = False) -> Params | None:
    """``fn``'s parameters as plain data (``drop_first``: an unbound method's ``self``); None
    when Python cannot say (some builtins), and then calls are not checked."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if drop_first and params and params[0].kind in _POSITIONAL:
        params = params[1:]
    return tuple((p.name, int(p.kind), p.default is not p.empty) for p in params)


def arity_of(params: Params | None) -> tuple[int, int] | None:
    """(least, most) positional arguments that bind with no keywords; None: nothing to check."""
    if params is None:
        return None
    least = most = 0
    for _name, kind, has_default in params:
        if kind in _POSITIONAL:
            most += 1
            least += 0 if has_default else 1
        elif kind == inspect.Parameter.VAR_POSITIONAL:
            most = sys.maxsize
        elif kind == inspect.Parameter.KEYWORD_ONLY and not has_default:
            return _NO_SHORTCUT  # a required keyword: every call is bound in full
    return least, most


def check_call(
    params: Params | None, arity: tuple[int, int] | None, args: tuple, kwargs: dict, name: str
) -> None:
    """Raises ``TypeError`` (naming ``name``) if ``args``/``kwargs`` cannot bind to ``params``."""
    if arity is None or (not kwargs and arity[0] <= len(args) <= arity[1]):
        return
    try:
        _signature(params).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{name}(): {e}") from None


@functools.lru_cache(maxsize=1024)
def _signature(params: Params) -> inspect.Signature:
    # Defaults are placeholders: binding only asks whether a parameter has one.
    return inspect.Signature(
        [
            inspect.Parameter(
                name, inspect._ParameterKind(kind), default=None if has else inspect.Parameter.empty
            )
            for name, kind, has in params
        ]
    )
