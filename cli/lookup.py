"""What ``ember get RESOURCE X`` means by X: a full id, a unique prefix of one (any case), or
for the resources that have names (actors, placement groups) a name, as ``ember
kill-actor`` takes them. Nothing matching is a failure (exit 1); a prefix of several is a
usage error naming the candidates (exit 2)."""

from __future__ import annotations

from typing import Any

from ember.cli.errors import NotUnique, fail
from ember.util.state import StateClient

# The columns X may be a prefix of, and the column X may name, per resource (as typed).
ID_COLUMNS: dict[str, tuple[str, ...]] = {
    "actors": ("actor_id",),
    "tasks": ("task_id",),
    "nodes": ("node_id",),
    "workers": ("worker_id",),
    "objects": ("object_id",),
    "placement-groups": ("placement_group_id",),
    "jobs": ("submission_id", "job_id"),
}
NAME_COLUMNS = {"actors": "name", "placement-groups": "name"}
SCAN_LIMIT = 10_000  # the state API's most rows a query; a prefix is sought among these
SHOWN = 10  # candidates an ambiguous prefix lists


def resolve_id(resource: str, given: str, timeout: int) -> str:
    """The full id ``given`` stands for; ends the command when none or several."""
    name = resource.replace("-", "_")
    result = StateClient().list(
        name, [], SCAN_LIMIT, timeout, detail=False, raise_on_missing_output=False
    )
    rows = [r.asdict() for r in result.rows]
    named = _by_name(resource, rows, given)
    if named is not None:
        return named
    want = given.lower()
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        for column in ID_COLUMNS[resource]:
            value = row.get(column)
            if isinstance(value, str) and value.lower().startswith(want):
                found.setdefault(value, row)
    if len(found) == 1:
        return next(iter(found))
    singular = resource[:-1].replace("-", " ")
    if not found:
        among = f" (looked among the first {SCAN_LIMIT})" if result.total > SCAN_LIMIT else ""
        what = "id, id prefix or name" if resource in NAME_COLUMNS else "id or id prefix"
        fail(f"no {singular} has the {what} {given!r}{among}; `ember list {resource}` lists them")
    raise NotUnique(_candidates(resource, singular, given, found))


def _by_name(resource: str, rows: list[dict[str, Any]], given: str) -> str | None:
    """The id of the one row named ``given`` (the live one when dead ones had the name too)."""
    column = NAME_COLUMNS.get(resource)
    if column is None:
        return None
    key = ID_COLUMNS[resource][0]
    named = [r for r in rows if r.get(column) == given]
    live = [r for r in named if r.get("state") not in ("DEAD", "REMOVED")]
    pick = live if live else named
    if len(pick) == 1:
        return pick[0][key]
    if len(pick) > 1:
        found = {r[key]: r for r in pick}
        singular = resource[:-1].replace("-", " ")
        raise NotUnique(_candidates(resource, singular, given, found))
    return None


def _candidates(resource: str, singular: str, given: str, found: dict[str, dict]) -> str:
    state = "status" if resource == "jobs" else "state"
    shown = [f"{i} ({row.get(state)})" for i, row in list(found.items())[:SHOWN]]
    more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return (
        f"{given!r} matches {len(found)} {resource}: {', '.join(shown)}{more}; give more "
        f"of the {singular}'s id"
    )
