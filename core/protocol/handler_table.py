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


# {(catalogue, owners' types, extra's ops, prefixes): [(op, owner index, attribute)]}
_PLANS: dict[tuple, list[tuple[str, int, str]]] = {}


def handler_plan(
    catalogue: Catalogue,
    owner_types: tuple[type, ...],
    extra_ops: frozenset[str] = frozenset(),
    prefixes: tuple[str, ...] = ("h_", "_h_"),
) -> list[tuple[str, int, str]]:
    """Which attribute of which owner handles each op: ``[(op, owner index, name)]``, worked
    out (and checked) once per set of types. A forked worker finds its core worker's plan
    made by the zygote (``zygote._preimport``): listing eight classes' attributes with
    ``dir()`` wrote reference counts into hundreds of shared strings, copying their pages."""
    key = (catalogue, owner_types, extra_ops, prefixes)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    plan = []
    seen: set[str] = set()
    strays: list[str] = []
    not_callable: list[str] = []
    for i, owner_type in enumerate(owner_types):
        for attr in dir(owner_type):
            prefix = next((p for p in prefixes if attr.startswith(p)), None)
            if prefix is None:
                continue
            op = attr[len(prefix) :]
            if op in catalogue:
                if not callable(getattr(owner_type, attr)):
                    not_callable.append(op)
                elif op not in seen:
                    seen.add(op)
                    plan.append((op, i, attr))
            elif op not in extra_ops:
                strays.append(f"{owner_type.__name__}.{attr}")
    if strays:
        raise HandlerTableError(
            f"{catalogue.service}: handler methods for ops not in the catalogue: {strays}"
        )
    covered = seen | extra_ops
    missing = catalogue.ops() - covered
    unknown = extra_ops - catalogue.ops()
    problems = []
    if missing:
        problems.append(f"no handler for {sorted(missing)}")
    if unknown:
        problems.append(f"handlers for ops not in the catalogue: {sorted(unknown)}")
    if not_callable:
        problems.append(f"handlers that are not callable: {sorted(not_callable)}")
    if problems:
        raise HandlerTableError(f"{catalogue.service} handler table: " + "; ".join(problems))
    _PLANS[key] = plan
    return plan


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
    extra_ops = frozenset(extra or ())
    plan = handler_plan(catalogue, tuple(type(o) for o in owners), extra_ops, prefixes)
    table: dict[str, Handler] = {op: getattr(owners[i], attr) for op, i, attr in plan}
    if extra:
        table.update(extra)
        return check_handlers(catalogue, table)  # extra's handlers may not be callable
    return table
