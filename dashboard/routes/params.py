"""The query parameters every list endpoint shares: paging, filters, sorting."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any

from ember.dashboard.query import MAX_LIMIT, check_sort, parse_filters
from fastapi import Query
from fastapi.responses import Response


@dataclass
class ListParams:
    limit: int
    offset: int
    filters: list[str]
    sort_by: str | None
    descending: bool

    def predicates(self, fields: tuple[str, ...]) -> list:
        check_sort(self.sort_by, fields)
        return parse_filters(self.filters, fields)


async def list_params(
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="page size")] = 100,
    offset: Annotated[int, Query(ge=0, le=100_000_000, description="rows to skip")] = 0,
    filter: Annotated[
        list[str] | None,
        Query(description="KEY=VALUE or KEY!=VALUE, repeatable; applied before the limit"),
    ] = None,
    sort_by: Annotated[str | None, Query(max_length=64, description="a field of the rows")] = None,
    descending: Annotated[bool, Query(description="sort order")] = False,
) -> ListParams:
    return ListParams(limit, offset, filter or [], sort_by, descending)


def json_response(obj: Any) -> Response:
    """JSON straight from ``json.dumps``: a page of rows skips FastAPI's per-value encoder,
    which costs more than the query itself at 100 rows."""
    return Response(
        json.dumps(obj, separators=(",", ":"), default=str), media_type="application/json"
    )
