"""The query parameters every list endpoint shares: paging, filters, sorting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from ember.dashboard.query import MAX_LIMIT, check_sort, page, parse_filters
from fastapi import Query
from fastapi.responses import Response
from pydantic_core import to_json


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

    def page(self, rows: Any, predicates: list, default_sort: str | None = None, **kw: Any) -> dict:
        """A page of ``rows`` (``query.page``) with these parameters."""
        return page(
            rows,
            predicates=predicates,
            sort_by=self.sort_by or default_sort,
            descending=self.descending,
            limit=self.limit,
            offset=self.offset,
            **kw,
        )


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
    """JSON straight from pydantic-core's encoder: a page of rows skips FastAPI's per-value
    encoder (``jsonable_encoder``: 340 ms for 10,000 event rows, against 11 ms here), which
    costs more than the query itself. The routes declare their rows' models in ``responses=``
    for the spec only (``ember.dashboard.schemas``)."""
    return Response(to_json(obj, fallback=str), media_type="application/json")
