"""The query of Ray's state API: its parameters, its filters and its reply envelope.

Ray's clients send ``limit``, ``timeout``, ``detail``, ``exclude_driver`` and three parallel
lists ``filter_keys`` / ``filter_predicates`` / ``filter_values``. Filters apply to every row
*before* the limit, and ``num_filtered`` says how many matched, so a filtered list is never
a filter over an arbitrary first page.

Matching follows Ray's: text compares without regard to case; a filter on an integer or a
boolean column reads its value as one (``pid=123``, ``is_alive=true``) and a value that is
not is an error naming the column; a row without the column never matches ``=``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any

from ember.dashboard.ray_state_schema import Resource
from fastapi import Query
from fastapi.responses import Response

MAX_LIMIT = 10_000  # Ray's RAY_MAX_LIMIT_FROM_API_SERVER default
DEFAULT_LIMIT = 100
DEFAULT_TIMEOUT = 30
TRUE = frozenset({"true", "1", "yes"})
FALSE = frozenset({"false", "0", "no"})


class StateApiError(ValueError):
    """A request the state API refuses: answered ``{"result": false, "msg": ...}``."""


@dataclass
class StateQuery:
    limit: int = DEFAULT_LIMIT
    timeout: int = DEFAULT_TIMEOUT
    detail: bool = False
    exclude_driver: bool = True
    filter_keys: list[str] = field(default_factory=list)
    filter_predicates: list[str] = field(default_factory=list)
    filter_values: list[str] = field(default_factory=list)


async def state_query(
    limit: Annotated[
        int, Query(ge=1, le=MAX_LIMIT, description="rows to return, after the filters")
    ] = DEFAULT_LIMIT,
    timeout: Annotated[
        int, Query(ge=1, le=3600, description="seconds the sources may take")
    ] = DEFAULT_TIMEOUT,
    detail: Annotated[bool, Query(description="every column, not only the list's")] = False,
    exclude_driver: Annotated[
        bool, Query(description="tasks: leave out the drivers' own tasks")
    ] = True,
    filter_keys: Annotated[
        list[str] | None, Query(description="a column per filter, repeatable")
    ] = None,
    filter_predicates: Annotated[
        list[str] | None, Query(description="'=' or '!=' per filter, in the same order")
    ] = None,
    filter_values: Annotated[
        list[str] | None, Query(description="the value per filter, in the same order")
    ] = None,
) -> StateQuery:
    return StateQuery(
        limit,
        timeout,
        detail,
        exclude_driver,
        filter_keys or [],
        filter_predicates or [],
        filter_values or [],
    )


@dataclass(frozen=True)
class Filter:
    key: str
    negate: bool
    value: Any  # the text lowered, or the int / bool / float the column holds

    def match(self, v: Any) -> bool:
        if v is None:
            return self.negate
        if isinstance(v, str):
            same = v.lower() == str(self.value).lower()
        else:
            same = v == self.value
        return same != self.negate


def parse_filters(q: StateQuery, res: Resource) -> list[Filter]:
    """The query's filters, checked against the resource's columns: ``StateApiError`` names
    an unknown column, a predicate other than ``=``/``!=``, or a value the column cannot hold."""
    keys, preds, values = q.filter_keys, q.filter_predicates, q.filter_values
    if not (len(keys) == len(preds) == len(values)):
        raise StateApiError(
            f"filter_keys, filter_predicates and filter_values must have the same length "
            f"(got {len(keys)}, {len(preds)} and {len(values)})"
        )
    out = []
    for key, pred, raw in zip(keys, preds, values, strict=True):
        column = key.strip().lower()
        if column not in res.filterable:
            raise StateApiError(
                f"The given filter column {key!r} is not supported for {res.name}. "
                f"Supported filter columns: {', '.join(sorted(res.filterable))}"
            )
        if pred not in ("=", "!="):
            raise StateApiError(
                f"Unsupported filter predicate {pred!r} for {key!r}. Available predicates: =, !="
            )
        out.append(Filter(column, pred == "!=", _typed(column, raw, res)))
    return out


def _typed(column: str, raw: str, res: Resource) -> Any:
    kind = res.column_type(column)
    text = raw.strip()
    if kind is bool:
        if text.lower() in TRUE:
            return True
        if text.lower() in FALSE:
            return False
        raise StateApiError(f"filter {column}={raw!r}: {column} is a boolean (true or false)")
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            raise StateApiError(
                f"filter {column}={raw!r}: {column} is {'an integer' if kind is int else 'a number'}"
            ) from None
    return text


def matcher(filters: list[Filter]) -> Callable[[dict[str, Any]], bool] | None:
    if not filters:
        return None
    return lambda row: all(f.key in row and f.match(row[f.key]) for f in filters)


@dataclass
class Listing:
    """The first ``limit`` matching rows, and the counts Ray's clients report."""

    total: int = 0
    num_filtered: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    partial_failure_warning: str = ""
    warnings: list[str] = field(default_factory=list)

    def take(
        self,
        rows: Iterable[Any],
        filters: list[Filter],
        limit: int,
        view: Callable[[Any], dict[str, Any]] | None = None,
    ) -> Listing:
        """Counts every row and every match; keeps the first ``limit`` matches. ``view``
        turns an item into its row (default: the item is the row)."""
        keep = matcher(filters)
        for item in rows:
            self.total += 1
            row = view(item) if view is not None else item
            if keep is not None and not keep(row):
                continue
            self.num_filtered += 1
            if len(self.rows) < limit:
                self.rows.append(row)
        return self

    def reply(self, res: Resource, detail: bool) -> Response:
        columns = res.shown(detail)
        result = {
            "total": self.total,
            # Ember's sources hand over every row they keep: nothing is cut at the source.
            "num_after_truncation": self.total,
            "num_filtered": self.num_filtered,
            "result": [{c: r.get(c) for c in columns} for r in self.rows],
            "partial_failure_warning": self.partial_failure_warning,
            "warnings": self.warnings or None,
        }
        return ok(result)


def ok(result: Any) -> Response:
    return _json(200, {"result": True, "msg": "", "data": {"result": result}})


def error(message: str, status: int = 400) -> Response:
    # ``msg`` for Ray's clients; ``detail`` as every other error of the dashboard has it.
    return _json(status, {"result": False, "msg": message, "detail": message, "data": {}})


def _json(status: int, body: dict[str, Any]) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":"), default=str),
        status_code=status,
        media_type="application/json",
    )
