"""Filter, sort and page a list on the server, filtering *before* the limit (Ray #33547).

A filter is ``key=value`` or ``key!=value`` on one of the list's fields; values compare as
text, so ``pid=123`` and ``state=ALIVE`` both work. Unknown fields are a ``QueryError`` that
names the field and the ones that exist (the routers turn it into a 422).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

MAX_LIMIT = 10_000


class QueryError(ValueError):
    """A malformed list query: ``field`` names the query parameter at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Predicate:
    key: str
    value: str
    negate: bool

    def __call__(self, row: dict[str, Any]) -> bool:
        return self.match(row.get(self.key))

    def match(self, v: Any) -> bool:
        # Most fields are text: compare without converting (a filter scans every row).
        if v.__class__ is str:
            return (v == self.value) != self.negate
        return (text(v) == self.value) != self.negate


def text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parse_filters(raw: Sequence[str], fields: Iterable[str]) -> list[Predicate]:
    allowed = set(fields)
    out = []
    for item in raw:
        if "!=" in item:
            key, value = item.split("!=", 1)
            negate = True
        elif "=" in item:
            key, value = item.split("=", 1)
            negate = False
        else:
            raise QueryError(
                "filter", f"filter {item!r} is not KEY=VALUE or KEY!=VALUE (e.g. state=ALIVE)"
            )
        key = key.strip()
        if key not in allowed:
            raise QueryError(
                "filter",
                f"filter on unknown field {key!r}; filterable fields: {', '.join(sorted(allowed))}",
            )
        out.append(Predicate(key, value.strip(), negate))
    return out


def check_sort(sort_by: str | None, fields: Iterable[str]) -> None:
    if sort_by is not None and sort_by not in set(fields):
        raise QueryError(
            "sort_by", f"cannot sort by {sort_by!r}; sortable fields: {', '.join(sorted(fields))}"
        )


def sort_key(field: str) -> Callable[[dict[str, Any]], tuple]:
    # None sorts first and mixed types never raise: (is-set, type name, value).
    def key(row: dict[str, Any]) -> tuple:
        v = row.get(field)
        if v is None:
            return (0, "", 0)
        if isinstance(v, int | float):
            return (1, "", v)
        return (2, type(v).__name__, str(v))

    return key


def page(
    rows: Iterable[dict[str, Any]],
    *,
    predicates: Sequence[Predicate] = (),
    sort_by: str | None = None,
    descending: bool = False,
    limit: int = 100,
    offset: int = 0,
    view: Callable[[Any], dict[str, Any]] | None = None,
    render: Callable[[Any], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One page of ``rows``: ``{"total", "offset", "limit", "items"}``; total counts matches.

    ``view(row)`` is what filters and sorting see (default: the row itself) and
    ``render(row)`` what the page shows; both run only where needed, so a page of a large
    list costs its 100 rows, not the list's length.
    """
    out = _page(rows, predicates, sort_by, descending, limit, offset, view)
    if render is not None:
        out["items"] = [render(r) for r in out["items"]]
    return out


def _page(rows, predicates, sort_by, descending, limit, offset, view) -> dict[str, Any]:
    if not predicates and sort_by is None and isinstance(rows, Sequence):
        return {
            "total": len(rows),
            "offset": offset,
            "limit": limit,
            "items": list(rows[offset : offset + limit]),
        }
    if predicates:
        one = predicates[0] if len(predicates) == 1 else None
        if view is None:
            keep = one or (lambda r: all(p(r) for p in predicates))
        else:
            keep = (
                (lambda r: one(view(r)))
                if one
                else (lambda r: all(p(v) for v in (view(r),) for p in predicates))
            )
        matched: Iterable[Any] = filter(keep, rows)
    else:
        matched = rows
    if sort_by is None:
        items: list[Any] = []
        total = 0
        for r in matched:
            if offset <= total < offset + limit:
                items.append(r)
            total += 1
        return {"total": total, "offset": offset, "limit": limit, "items": items}
    all_rows = list(matched)
    field_key = sort_key(sort_by)
    key = field_key if view is None else (lambda r: field_key(view(r)))
    want = offset + limit
    # A partial sort: the first offset+limit rows only, O(n log k).
    if want < len(all_rows) // 4:
        pick = heapq.nlargest if descending else heapq.nsmallest
        head = pick(want, all_rows, key=key)
    else:
        head = sorted(all_rows, key=key, reverse=descending)
    return {"total": len(all_rows), "offset": offset, "limit": limit, "items": head[offset:want]}
