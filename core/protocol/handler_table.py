"""Handler tables checked against the catalogue when a process starts.

A process's table must handle exactly the ops of its catalogue: a catalogued op with no
handler would answer callers with ``NoHandlerError`` only when first used, and a handler for
an op nobody declared is a message the catalogue does not tell readers about. Both are
start-up errors here instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ember.protocol.messages.base import Catalogue
from ember.protocol.stream import Handler, Handlers


class HandlerTableError(TypeError):
    """A handler table does not match its catalogue."""


def check_handlers(catalogue: Catalogue, handlers: Mapping[str, Handler]) -> Handlers:
    """``handlers`` as a plain dict, once it covers the catalogue's ops and nothing else."""
    missing = catalogue.ops() - set(handlers)
    unknown = set(handlers) - catalogue.ops()
    problems = []
    if missing:
        problems.append(f"no handler for {sorted(missing)}")
    if unknown:
        problems.append(f"handlers for ops not in the catalogue: {sorted(unknown)}")
    not_callable = sorted(op for op, h in handlers.items() if not callable(h))
    if not_callable:
        problems.append(f"handlers that are not callable: {not_callable}")
    if problems:
        raise HandlerTableError(f"{catalogue.service} handler table: " + "; ".join(problems))
    return dict(handlers)


def handlers_from(
    catalogue: Catalogue,
    *owners: Any,
    extra: Mapping[str, Handler] | None = None,
    prefixes: tuple[str, ...] = ("h_", "_h_"),
) -> Handlers:
    """The table made from methods named ``h_<op>`` (or ``_h_<op>``) on ``owners``, first
    owner first, plus ``extra`` (lambdas, methods named otherwise), checked against
    ``catalogue``. A method with a handler prefix that names no catalogued op is an error
    too: it is a handler the wire cannot reach."""
    table: dict[str, Handler] = {}
    strays: list[str] = []
    for owner in owners:
        for attr in dir(type(owner)):
            prefix = next((p for p in prefixes if attr.startswith(p)), None)
            if prefix is None:
                continue
            op = attr[len(prefix) :]
            if op in catalogue:
                table.setdefault(op, getattr(owner, attr))
            elif not (extra and op in extra):
                strays.append(f"{type(owner).__name__}.{attr}")
    if strays:
        raise HandlerTableError(
            f"{catalogue.service}: handler methods for ops not in the catalogue: {strays}"
        )
    table.update(extra or {})
    return check_handlers(catalogue, table)
