"""The rows and replies of Ray's state API (``/api/v0/...``).

Ray's own clients (``ray list``, ``ray get``, ``ray summary``, ``ray.util.state``) build their
typed dataclasses from these rows with ``Schema(**row)`` and validate every value, so the
field names, the types and the enumerated values are Ray's. The rows are the dataclasses of
``ember.util.state.common`` (which ``ember.util.state`` and the CLI read replies into); the
reply models here wrap them for the OpenAPI spec, and the routes serialise plain dicts built
to match them.

Each resource's ``Resource`` says which columns a list shows without ``detail`` (the rest
appear with ``detail=true``), which columns a filter may name, and the column a
``ray get`` looks an id up by.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from ember.util.state.common import SCHEMAS, StateSchema
from pydantic import BaseModel


@dataclass(frozen=True)
class Resource:
    """One listable resource: its row class, the columns shown without ``detail``, the
    columns a filter may name, and the id column ``ray get`` filters on."""

    name: str
    model: type[StateSchema]
    base: tuple[str, ...]
    filterable: frozenset[str]
    id_key: str | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self.model.list_columns(detail=True))

    def shown(self, detail: bool) -> tuple[str, ...]:
        return self.columns if detail else self.base

    def column_type(self, column: str) -> type | None:
        """``int``, ``bool``, ``float`` or ``str`` for a scalar column (``None`` otherwise):
        how a filter's text value is read."""
        annotation = typing.get_type_hints(self.model)[column]
        args = typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            scalars = [a for a in args if a is not type(None)]
            annotation = scalars[0] if len(scalars) == 1 else None
        if typing.get_origin(annotation) is Literal:
            return str
        return annotation if annotation in (int, bool, float, str) else None


RESOURCES: dict[str, Resource] = {
    name: Resource(
        name,
        schema,
        tuple(schema.list_columns(detail=False)),
        frozenset(schema.filterable_columns()),
        schema.id_key,
    )
    for name, schema in SCHEMAS.items()
}


# -- replies -------------------------------------------------------------------------------
Row = TypeVar("Row")


class ListResult(BaseModel, Generic[Row]):
    """How many rows the cluster has (``total``), how many the sources returned
    (``num_after_truncation``), how many matched the filters (``num_filtered``), and the
    first ``limit`` of those (``result``)."""

    total: int
    num_after_truncation: int
    num_filtered: int
    result: list[Row]
    partial_failure_warning: str | None = ""
    warnings: list[str] | None = None


class ListData(BaseModel, Generic[Row]):
    result: ListResult[Row]


class ListReply(BaseModel, Generic[Row]):
    result: bool
    msg: str
    data: ListData[Row]


class StateSummary(BaseModel):
    node_id_to_summary: dict[str, dict[str, Any]]


class SummaryResult(BaseModel):
    total: int
    num_after_truncation: int
    num_filtered: int
    result: StateSummary
    partial_failure_warning: str | None = ""
    warnings: list[str] | None = None


class SummaryData(BaseModel):
    result: SummaryResult


class SummaryReply(BaseModel):
    result: bool
    msg: str
    data: SummaryData


class ErrorReply(BaseModel):
    """An error, as Ray's clients read it: ``result`` false and ``msg`` saying why (and
    ``detail``, the same, as the dashboard's other errors have it)."""

    result: Literal[False]
    msg: str
    detail: str
    data: dict[str, Any] = {}
