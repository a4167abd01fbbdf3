"""Ray 2.x's ``ray.util.state`` functions over an Ember dashboard's ``/api/v0`` (Ray's state
API, ``docs/dashboard-api.md``): the same names, parameters, defaults and results, so a Ray
program's state queries run unchanged with ``import ember as ray``.

The dashboard is found by ``ember.rest_client.connect_dashboard(address)``; this module
is runtime-side and reaches the dashboard only over HTTP.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ember import global_state
from ember.cluster_token import dashboard_token
from ember.rest_client import DashboardClient, DashboardError, connect_dashboard
from ember.util.state.common import (
    DEFAULT_LIMIT,
    DEFAULT_RPC_TIMEOUT,
    SCHEMAS,
    JobState,
    ObjectState,
    ServerUnavailable,
    StateApiException,
    StateSchema,
    TaskState,
)

Filter = tuple[str, str, Any]  # (column, "=" or "!=", value)
# Ray asks the server to answer within 80% of the caller's timeout, so a slow source comes
# back as a partial answer rather than as the caller's own timeout.
SERVER_TIMEOUT_SHARE = 0.8


@dataclass
class ListResult:
    """One list query's rows and the counts the envelope carries: ``total`` rows in the
    cluster, ``num_filtered`` of them matching the filters, ``rows`` the first ``limit``."""

    rows: list[StateSchema]
    total: int
    num_filtered: int
    num_after_truncation: int
    partial_failure_warning: str = ""
    warnings: list[str] = field(default_factory=list)


# A dashboard found by the caller (the CLI, with its --token and --temp-dir), for the calls
# made inside ``using_dashboard``.
_GIVEN_DASHBOARD: ContextVar[DashboardClient | None] = ContextVar("dashboard", default=None)


@contextmanager
def using_dashboard(dashboard: DashboardClient) -> Iterator[None]:
    """The state functions called inside ask ``dashboard`` when given no address."""
    token = _GIVEN_DASHBOARD.set(dashboard)
    try:
        yield
    finally:
        _GIVEN_DASHBOARD.reset(token)


class StateClient:
    """One dashboard, asked the state API's questions. The CLI uses it for the counts a list
    reply carries (``ListResult``); the module's functions make one per call, as Ray's do."""

    def __init__(self, address: str | None = None) -> None:
        given = _GIVEN_DASHBOARD.get()
        if given is not None and address is None:
            self.dashboard = given
            return
        try:
            self.dashboard: DashboardClient = _this_process_dashboard(address) or (
                connect_dashboard(address)
            )
        except DashboardError as e:
            raise ServerUnavailable(str(e)) from None

    def reply(self, path: str, params: list[tuple[str, Any]], timeout: float) -> Any:
        """``data.result`` of a state API reply; a refused query raises its reason."""
        server = max(1, int(timeout * SERVER_TIMEOUT_SHARE))
        try:
            body = self.dashboard.get(path, [*params, ("timeout", server)], timeout=timeout)
        except DashboardError as e:
            if e.status is None:
                raise ServerUnavailable(str(e)) from None
            raise StateApiException(f"the state API refused {path}: {e}") from None
        if not isinstance(body, dict) or body.get("result") is not True:
            msg = body.get("msg") if isinstance(body, dict) else body
            raise StateApiException(f"the state API refused {path}: {msg}")
        return body["data"]["result"]

    def list(
        self,
        resource: str,
        filters: list[Filter] | None = None,
        limit: int = DEFAULT_LIMIT,
        timeout: float = DEFAULT_RPC_TIMEOUT,
        detail: bool = False,
        raise_on_missing_output: bool = True,
        _explain: bool = False,
    ) -> ListResult:
        schema = SCHEMAS[resource]
        filters = check_filters(filters)
        if _conflicting(filters):
            return ListResult([], 0, 0, 0)
        params: list[tuple[str, Any]] = [("limit", limit), ("detail", detail)]
        params.append(("exclude_driver", True))
        for key, predicate, value in filters:
            params += [
                ("filter_keys", key),
                ("filter_predicates", predicate),
                ("filter_values", _text(value)),
            ]
        data = self.reply(f"/api/v0/{resource}", params, timeout)
        if raise_on_missing_output:
            _raise_on_missing_output(resource, data)
        out = ListResult(
            rows=[schema.from_row(r) for r in data["result"]],
            total=data["total"],
            num_filtered=data["num_filtered"],
            num_after_truncation=data["num_after_truncation"],
            partial_failure_warning=data.get("partial_failure_warning") or "",
            warnings=list(data.get("warnings") or []),
        )
        if _explain:
            for text in explain(out, resource):
                warnings.warn(text, stacklevel=3)
        return out

    def get(
        self, resource: str, id: str, timeout: float = DEFAULT_RPC_TIMEOUT, key: str | None = None
    ) -> list[StateSchema]:
        """Every row whose id column (``key``: another column) is ``id``, with every column."""
        key = key or SCHEMAS[resource].id_key
        result = self.list(
            resource,
            [(key, "=", id)],
            timeout=timeout,
            detail=True,
            raise_on_missing_output=False,
        )
        return result.rows

    def summary(
        self,
        resource: str,
        timeout: float = DEFAULT_RPC_TIMEOUT,
        raise_on_missing_output: bool = True,
        _explain: bool = False,
    ) -> dict[str, Any]:
        data = self.reply(f"/api/v0/{resource}/summarize", [], timeout)
        if raise_on_missing_output:
            _raise_on_missing_output(resource, data)
        if _explain and data.get("partial_failure_warning"):
            warnings.warn(data["partial_failure_warning"], stacklevel=3)
        return data["result"]["node_id_to_summary"]


def _this_process_dashboard(address: str | None) -> DashboardClient | None:
    """With no address, the dashboard of the cluster this process is connected to (Ray: "the
    initialized ray"): its driver knows the URL at once, while the GCS learns it only once
    the dashboard has started."""
    node = getattr(global_state.worker, "node", None) if address is None else None
    url = node.get("dashboard_url") if isinstance(node, dict) else None
    if not url:
        return None
    return DashboardClient(url, dashboard_token(node.get("session_dir"), node.get("token_file")))


def check_filters(filters: list[Filter] | None) -> list[Filter]:
    """The filters as Ray checks them before asking: (key, predicate, value) triples whose
    predicate is ``=`` or ``!=`` (``ValueError`` otherwise, as Ray's ``ListApiOptions``)."""
    out = []
    for f in filters or []:
        if not isinstance(f, tuple | list) or len(f) != 3:
            raise ValueError(
                f"The given filter has incorrect input type, {f}. "
                "Provide (key, predicate, value) tuples."
            )
        if f[1] not in ("=", "!="):
            raise ValueError(
                f"Unsupported filter predicate {f[1]} is given. Available predicates: =, !=."
            )
        out.append((str(f[0]), f[1], f[2]))
    return out


def _conflicting(filters: list[Filter]) -> bool:
    """Two ``=`` filters on one column with different values match nothing: Ray answers an
    empty list with a warning without asking."""
    equal: dict[str, Any] = {}
    for key, predicate, value in filters:
        if predicate != "=":
            continue
        if key in equal and equal[key] != value:
            warnings.warn(
                f"There are multiple '=' filters with the same key '{key}' but different "
                f"values '{equal[key]}' & '{value}'. Empty result set will be returned",
                UserWarning,
                stacklevel=4,
            )
            return True
        equal.setdefault(key, value)
    return False


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _raise_on_missing_output(resource: str, data: dict[str, Any]) -> None:
    """Ray's rule: a reply with rows missing (a source that did not answer, or rows cut at
    the source) is an error unless the caller accepts partial output."""
    if data.get("partial_failure_warning"):
        raise StateApiException(
            f"Failed to retrieve all {resource} from the cluster: "
            f"{data['partial_failure_warning']} To accept partial output, pass "
            "raise_on_missing_output=False."
        )
    total, kept = data["total"], data["num_after_truncation"]
    if total != kept:
        raise StateApiException(
            f"Failed to retrieve all {total} {resource} from the cluster: only {kept} were "
            "read from the source. To accept partial output, pass raise_on_missing_output=False."
        )


def explain(result: ListResult, resource: str) -> list[str]:
    """The warnings Ray prints about a list reply: a source missing, rows cut at the source,
    more rows matching than the limit let through, and the server's own warnings."""
    out = []
    if result.partial_failure_warning:
        out.append(result.partial_failure_warning)
    if result.total > result.num_after_truncation:
        out.append(
            f"The returned data may contain incomplete result. {result.num_after_truncation} "
            f"({result.total} total from the cluster) {resource} are retrieved from the "
            "data source."
        )
    if result.num_filtered > len(result.rows):
        out.append(
            f"Limit last {len(result.rows)} entries (Total {result.num_filtered}). Use "
            "`--filter` to reduce the amount of data to return or setting a higher limit "
            "with `--limit` to see all data."
        )
    return out + result.warnings


# -- lists -----------------------------------------------------------------------------------
def _lister(resource: str):  # noqa: ANN202 - the signature is spelled out below
    def list_resource(
        address: str | None = None,
        filters: list[Filter] | None = None,
        limit: int = DEFAULT_LIMIT,
        timeout: int = DEFAULT_RPC_TIMEOUT,
        detail: bool = False,
        raise_on_missing_output: bool = True,
        _explain: bool = False,
    ) -> list[Any]:
        return (
            StateClient(address)
            .list(resource, filters, limit, timeout, detail, raise_on_missing_output, _explain)
            .rows
        )

    list_resource.__name__ = list_resource.__qualname__ = f"list_{resource}"
    list_resource.__doc__ = (
        f"The cluster's {resource.replace('_', ' ')}: at most ``limit`` rows matching every "
        "``(column, '=' | '!=', value)`` of ``filters`` (text compares without regard to "
        "case), as ``ember.util.state.common`` rows; ``detail`` fills the detail-only "
        "columns. Raises ``StateApiException`` when the dashboard cannot answer or refuses "
        "the query, and (``raise_on_missing_output``) when rows are missing from the reply."
    )
    return list_resource


list_actors = _lister("actors")
list_tasks = _lister("tasks")
list_nodes = _lister("nodes")
list_workers = _lister("workers")
list_objects = _lister("objects")
list_jobs = _lister("jobs")
list_placement_groups = _lister("placement_groups")
list_runtime_envs = _lister("runtime_envs")
list_cluster_events = _lister("cluster_events")


# -- get by id -------------------------------------------------------------------------------
def _getter(resource: str):  # noqa: ANN202 - the signature is spelled out below
    def get_resource(
        id: str,
        address: str | None = None,
        timeout: int = DEFAULT_RPC_TIMEOUT,
        _explain: bool = False,
    ) -> Any:
        return one(StateClient(address).get(resource, id, timeout))

    singular = resource[:-1].replace("_", " ")
    get_resource.__name__ = get_resource.__qualname__ = f"get_{resource[:-1]}"
    get_resource.__doc__ = f"The {singular} with this id, with every column; None if none."
    return get_resource


get_actor = _getter("actors")
get_node = _getter("nodes")
get_worker = _getter("workers")
get_placement_group = _getter("placement_groups")


def get_job(
    id: str, address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT, _explain: bool = False
) -> JobState | None:
    """The job with this submission id (Ray's key) or, since Ember's jobs are drivers' and
    have none, this job id; None if there is none."""
    client = StateClient(address)
    return one(client.get("jobs", id, timeout) or client.get("jobs", id, timeout, "job_id"))


def get_task(
    id: Any, address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT, _explain: bool = False
) -> TaskState | list[TaskState] | None:
    """The task with this id (or of this ``ObjectRef``): None if unknown, its row, or a list
    of its attempts' rows when it ran more than once (as Ray's)."""
    if not isinstance(id, str):
        id = id.task_id().hex()  # an ObjectRef: the task that makes it
    rows = StateClient(address).get("tasks", id, timeout)
    if not rows:
        return None
    return rows[0] if len(rows) == 1 else rows  # type: ignore[return-value]


def get_objects(
    id: str, address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT, _explain: bool = False
) -> list[ObjectState]:
    """Every reference to the object with this id (one per process holding it); empty if
    none."""
    return StateClient(address).get("objects", id, timeout)  # type: ignore[return-value]


def one(rows: list[StateSchema]) -> Any:
    return rows[0] if rows else None


# -- summaries -------------------------------------------------------------------------------
def _summarizer(resource: str, shape: str):  # noqa: ANN202 - the signature is spelled out below
    def summarize(
        address: str | None = None,
        timeout: int = DEFAULT_RPC_TIMEOUT,
        raise_on_missing_output: bool = True,
        _explain: bool = False,
    ) -> dict[str, Any]:
        return StateClient(address).summary(resource, timeout, raise_on_missing_output, _explain)

    summarize.__name__ = summarize.__qualname__ = f"summarize_{resource}"
    summarize.__doc__ = f"The cluster's {resource} summarised: ``{shape}``."
    return summarize


summarize_tasks = _summarizer(
    "tasks",
    '{"cluster": {"summary": {name: {"func_or_class_name", "type", "state_counts"}}, '
    '"total_tasks", "total_actor_tasks", "total_actor_scheduled", "summary_by"}}',
)
summarize_actors = _summarizer(
    "actors",
    '{"cluster": {"summary": {class: {"class_name", "state_counts"}}, "total_actors", '
    '"summary_by"}}',
)
summarize_objects = _summarizer(
    "objects",
    '{"cluster": {"summary": {call_site: {"total_objects", "total_size_mb", '
    '"ref_type_counts", ...}}, "total_objects", "total_size_mb", "summary_by"}}',
)
