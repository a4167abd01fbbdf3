"""The rows of Ember's own REST API (``/api/*``), declared once per resource.

Each resource's class lists every field its rows carry, with its type and two marks:
``filterable`` (a list's ``filter=`` and ``sort_by=`` may name it) and ``detail`` (only the
resource's detail endpoint, ``/api/<resource>/{id}``, carries it). From that one class come:

- the OpenAPI response models of the list and detail endpoints (``Resource.page_model``,
  ``Resource.detail_model``; the routes name them in ``responses=`` and keep returning plain
  dicts, so a page of 10,000 rows is not validated field by field on every request);
- the filter and sort validation of the lists (``Resource.filterable``);
- the browser app's TypeScript types (``ember.dashboard.schema_ts`` writes
  ``frontend/src/lib/api-types.ts``).

``tests/dashboard/test_schemas.py`` checks that the rows the endpoints return have exactly
these fields, so the declaration cannot drift from the code that builds the rows
(``state.py``, ``task_table.row``, the agent's worker, object and log rows, the GCS's actor
rows).

Ray's state API (``/api/v0``) is a second wire format of the same state, not a second truth:
its rows (Ray's names and types, fixed by Ray's clients, declared in
``ember.util.state.common``) are translated by ``ray_state_rows`` from what these rows are
built from, and ``tests/test_state_tools.py`` checks that the two agree on every row's id
and state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

FILTERABLE = "x-ember-filterable"
DETAIL = "x-ember-detail"


def col(
    description: str = "", *, filterable: bool = True, detail: bool = False, required: bool = True
) -> Any:
    """A field of a row. ``required=False``: a field only some rows of the list carry."""
    extra = {FILTERABLE: filterable, DETAIL: detail}
    if required:
        return Field(description=description, json_schema_extra=extra)
    return Field(None, description=description, json_schema_extra=extra)


class Row(BaseModel):
    # Undeclared fields are refused: the spec says ``additionalProperties: false``, so a row
    # that gains a field without its declaration fails the schema tests.
    model_config = ConfigDict(extra="forbid")


NodeState = Literal["ALIVE", "DEAD"]
ActorState = Literal["PENDING", "ALIVE", "RESTARTING", "DEAD"]
# A task's phases, in order (Ray's TaskStatus names where they exist): the task table codes
# a state as its index here (``task_columns.STATES``), so codes compare as phases do.
TASK_STATES = (
    "PENDING_ARGS_AVAIL",
    "PENDING_NODE_ASSIGNMENT",
    "SUBMITTED_TO_WORKER",
    "RUNNING",
    "RETRYING",
    "FINISHED",
    "FAILED",
)
TaskState = Literal[TASK_STATES]  # type: ignore[valid-type]
TaskType = Literal["NORMAL_TASK", "ACTOR_TASK", "ACTOR_CREATION_TASK"]
PlacementGroupState = Literal["PENDING", "CREATED", "REMOVED"]
JobStatus = Literal["PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"]


class Worker(Row):
    """An Ember process of a node (``state.set_workers`` gives every row every field)."""

    node_id: str = col()
    pid: int = col()
    worker_id: str | None = col("null for a node's own components")
    kind: str = col("worker, driver, raylet, gcs_server, zygote, agent, dashboard")
    component: str = col("the same as kind")
    state: str = col("IDLE, RUNNING, ACTOR for workers; '-' for the node's components")
    activity: str | None = col("workers: 'running <function>', 'actor <Class>' or 'idle'")
    current_task: str | None = col("the function a leased worker runs")
    actor_id: str | None = col()
    actor_class: str | None = col()
    job_id: str | None = col()
    blocked: bool | None = col("a worker waiting in get()")
    cpu_percent: float | None = col()
    rss_bytes: int | None = col()
    uss_bytes: int | None = col("null where the process's memory map cannot be read")
    num_open_files: int | None = col()
    start_time: float | None = col()
    uptime_s: float | None = col()


class Node(Row):
    node_id: str = col()
    node_ip: str | None = col()
    hostname: str | None = col()
    state: NodeState = col()
    is_head: bool = col()
    start_time: float = col()
    last_seen: float = col("unix time of the node's last report")
    cpu_percent: float | None = col()
    mem_used_bytes: int | None = col()
    num_workers: int = col()
    resources_total: dict[str, float] = col(filterable=False)
    resources_available: dict[str, float] = col(filterable=False)
    lost_reason: str | None = col("why a DEAD node is dead", filterable=False)
    metrics: dict[str, Any] = col(
        "the latest metrics sample (docs/dashboard-api.md)", filterable=False, detail=True
    )
    info: dict[str, Any] = col("what the node's agent said of it", filterable=False, detail=True)
    workers: list[Worker] = col("the node's Ember processes", filterable=False, detail=True)


class ActorIncarnation(BaseModel):
    """An actor's life on one worker that ended (a restart followed it)."""

    node_id: str | None
    pid: int | None
    worker_id: str | None
    start_time: float | None = Field(description="when its constructor finished")
    end_time: float | None
    death_cause: str


class Actor(Row):
    """The GCS's actor row (``ActorInfo.public``, ids as hex) and what the dashboard adds."""

    actor_id: str = col()
    class_name: str = col()
    name: str = col("'' for an unnamed actor")
    namespace: str = col()
    title: str = col("Class(name), or the class")
    state: ActorState = col()
    address: str | None = col("its worker's address", filterable=False)
    node_id: str | None = col()
    pid: int | None = col()
    worker_id: str | None = col()
    job_id: str = col()
    num_restarts: int = col()
    death_cause: str = col("'' while alive")
    pending_reason: str | None = col("a pending actor: infeasible, or what it waits for")
    placement_group_id: str | None = col("the placement group it was placed in")
    creator_actor_id: str | None = col("the actor that created it; null: a driver did")
    owner_worker_id: str | None = col()
    parent_task_id: str | None = col(filterable=False)
    pending_calls: int = col()
    executed_calls: int = col()
    detached: bool = col()
    unschedulable: bool = col("no node can ever take it (hard node affinity): it died so")
    resources: dict[str, float] = col(filterable=False)
    start_time: float = col()
    end_time: float | None = col()
    creation_task_id: str | None = col("its constructor's task (attempt n: incarnation n)")
    shared_process: bool = col("hosted with other actors in one process (shared_process=True)")
    incarnations: list[ActorIncarnation] = col(
        "its ended incarnations, oldest first (node_id and pid above: the live one's)",
        filterable=False,
    )
    children: list[str] = col("ids of the actors it created", filterable=False, detail=True)


class TaskEvent(BaseModel):
    state: str
    time: float


class TaskAttempt(BaseModel):
    """One attempt of a task, where it ran (each is also a row of ``/api/tasks``)."""

    attempt: int
    state: str
    node_id: str | None
    worker_id: str | None
    pid: int | None
    start_time: float | None
    end_time: float | None
    error_type: str | None


class Task(Row):
    """``TaskTable.row``: one attempt of a task (every field is filterable: the table filters
    its own columns). A retried task has a row per attempt, each where it ran."""

    task_id: str = col()
    name: str = col("the function, or Class.method")
    state: TaskState = col()
    job_id: str = col()
    actor_id: str | None = col()
    placement_group_id: str | None = col("the placement group it was scheduled in")
    node_id: str | None = col()
    worker_id: str | None = col()
    pid: int | None = col()
    attempt: int = col()
    type: TaskType = col()
    submitted_time: float | None = col()
    start_time: float | None = col()
    end_time: float | None = col()
    duration_s: float | None = col()
    error_type: str | None = col("Ray's error type of a failed task")
    error: str | None = col("the traceback of a failed task")
    events: list[TaskEvent] = col("the task's phases", filterable=False, detail=True)
    attempts: list[TaskAttempt] = col(
        "every kept attempt of the task, first first", filterable=False, detail=True
    )
    task_log_info: dict[str, Any] | None = col(
        "Ray's: its worker's .out/.err files and the byte range this attempt "
        "wrote (GET /api/tasks/{id}/log reads them); ends null while it runs",
        filterable=False,
        detail=True,
    )
    parent_task_id: str | None = col(
        "the task that submitted it; null: a driver (or a task no longer kept)",
        filterable=False,
        detail=True,
    )


class Object(Row):
    """A reference the agent collected (``Agent.objects``): one row per reference kind."""

    node_id: str = col()
    object_id: str = col()
    pid: int | None = col()
    reference_type: str = col("LOCAL_REFERENCE, PINNED_IN_MEMORY, USED_BY_PENDING_TASK, ...")
    object_size: int | None = col()
    status: str | None = col()
    call_site: str | None = col()
    ip: str | None = col()
    worker_id: str | None = col()
    is_driver: bool | None = col(filterable=False)
    actor: str | None = col("the actor the process holds", filterable=False)


class LogFile(Row):
    """A file of a node's log index (``ember.agent.logs.describe`` plus size and mtime)."""

    node_id: str = col()
    name: str = col()
    component: str = col()
    pid: int | None = col()
    worker_id: str | None = col()
    size: int = col()
    mtime: float = col()
    stream: str = col("out, err or log ('' when the name has no suffix)")
    rotated: str | None = col("a rotated file's suffix; null for a live file")


class Event(Row):
    time: float = col()
    severity: str = col("INFO, WARNING, ERROR")
    source: str = col("task, worker, agent, dashboard, gcs")
    node_id: str | None = col()
    job_id: str | None = col("the job it concerns, when one does")
    pid: int | None = col()
    kind: str = col("TASK_FAILED, WORKER_DIED, ACTOR_DIED, NODE_LOST, ...")
    message: str = col()
    detail: str | None = col("a traceback", filterable=False)


class Bundle(BaseModel):
    index: int
    resources: dict[str, float]
    node_id: str | None = Field(description="where it is reserved; null while pending")


class PlacementGroup(Row):
    """The GCS's placement group (``_Group.public``) with its bundles laid out."""

    placement_group_id: str = col()
    name: str = col("'' for an unnamed group")
    state: PlacementGroupState = col()
    strategy: str = col("PACK, SPREAD, STRICT_PACK or STRICT_SPREAD")
    job_id: str = col("the job that created it")
    detached: bool = col()
    pending_reason: str | None = col("why a PENDING group is not placed yet", filterable=False)
    created_at: float | None = col()
    bundles: list[Bundle] = col(filterable=False)


class DriverInfo(BaseModel):
    id: str
    node_ip_address: str
    pid: str


class Job(Row):
    """A job as ``GET /api/jobs/`` lists it: Ray's ``JobDetails`` field for field (Ray's
    clients read these), then Ember's own. A submitted job's type is SUBMISSION; a driver
    started by hand is a DRIVER job with no submission id. Times in milliseconds."""

    type: Literal["SUBMISSION", "DRIVER"] = col(filterable=False)
    job_id: str | None = col("the driver's job id (hex), once it called init()", filterable=False)
    submission_id: str | None = col("null for a DRIVER job", filterable=False)
    driver_info: DriverInfo | None = col(filterable=False)
    status: JobStatus = col(filterable=False)
    entrypoint: str = col("the shell command; a DRIVER job's command line", filterable=False)
    message: str | None = col(filterable=False)
    error_type: str | None = col(filterable=False)
    start_time: int | None = col(filterable=False)
    end_time: int | None = col(filterable=False)
    metadata: dict[str, str] | None = col(filterable=False)
    runtime_env: dict[str, Any] | None = col(filterable=False)
    driver_agent_http_address: str | None = col(filterable=False)
    driver_node_id: str | None = col(filterable=False)
    driver_exit_code: int | None = col(filterable=False)
    entrypoint_num_cpus: float | None = col(filterable=False)
    entrypoint_num_gpus: float | None = col(filterable=False)
    entrypoint_memory: int | None = col(filterable=False)
    entrypoint_resources: dict[str, float] | None = col(filterable=False)
    entrypoint_label_selector: dict[str, str] | None = col(filterable=False)
    driver_pid: int | None = col("the entrypoint's process", filterable=False)
    driver_node_ip: str | None = col(filterable=False)
    log_name: str | None = col("the entrypoint's log file on its node", filterable=False)


class ObjectsSummary(BaseModel):
    by_node: dict[str, dict[str, int]]
    by_reference_type: dict[str, int]


@dataclass(frozen=True)
class Resource:
    """One resource of ``/api``: its declaration, its list path and what its page adds."""

    name: str  # the TypeScript and OpenAPI name's stem: Node -> NodeRow, NodePage, NodeDetail
    row: type[Row]
    path: str
    page_extra: dict[str, Any] = field(default_factory=dict)  # {field: (type, description)}
    has_detail: bool = False
    # False: the list is a plain JSON array of rows (``/api/jobs/``, whose shape is Ray's).
    paged: bool = True

    def _fields(self, detail: bool) -> dict[str, Any]:
        return {
            k: f
            for k, f in self.row.model_fields.items()
            if bool((f.json_schema_extra or {}).get(DETAIL)) == detail  # type: ignore[union-attr]
        }

    @cached_property
    def fields(self) -> tuple[str, ...]:
        """What a list's row carries, in order."""
        return tuple(self._fields(False))

    @cached_property
    def detail_fields(self) -> tuple[str, ...]:
        return tuple(self._fields(True))

    @cached_property
    def filterable(self) -> tuple[str, ...]:
        """What ``filter=`` and ``sort_by=`` may name."""
        return tuple(
            k
            for k, f in self._fields(False).items()
            if (f.json_schema_extra or {}).get(FILTERABLE)  # type: ignore[union-attr]
        )

    @cached_property
    def list_model(self) -> type[Row]:
        if not self.detail_fields:
            return self.row  # one component in the spec, not two of the same shape
        fields = {k: (f.annotation, f) for k, f in self._fields(False).items()}
        model = create_model(f"{self.name}Row", __base__=Row, **fields)  # type: ignore[call-overload]
        model.__doc__ = self.row.__doc__
        return model

    @cached_property
    def detail_model(self) -> type[Row]:
        if not self.detail_fields:
            return self.list_model
        fields = {k: (f.annotation, f) for k, f in self._fields(True).items()}
        return create_model(  # type: ignore[call-overload]
            f"{self.name}Detail", __base__=self.list_model, **fields
        )

    @cached_property
    def page_model(self) -> type[BaseModel]:
        fields: dict[str, Any] = {
            "total": (int, Field(description="rows matching the filters")),
            "offset": (int, Field()),
            "limit": (int, Field()),
            "items": (list[self.list_model], Field()),  # type: ignore[name-defined]
        }
        for k, (typ, doc) in self.page_extra.items():
            fields[k] = (typ, Field(description=doc))
        return create_model(f"{self.name}Page", **fields)  # type: ignore[call-overload]

    def page_responses(self) -> dict[int | str, dict[str, Any]]:
        """The list route's ``responses=``: the page (or the array), for the docs only."""
        return {200: {"model": self.page_model if self.paged else list[self.list_model]}}  # type: ignore[name-defined]

    def detail_responses(self) -> dict[int | str, dict[str, Any]]:
        return {200: {"model": self.detail_model}}


_DROPPED = (int, "rows evicted past the dashboard's cap")
RESOURCES: dict[str, Resource] = {
    r.name: r
    for r in (
        Resource("Node", Node, "/api/nodes", has_detail=True),
        Resource("Worker", Worker, "/api/workers"),
        Resource("Actor", Actor, "/api/actors", {"dropped": _DROPPED}, has_detail=True),
        Resource("Task", Task, "/api/tasks", {"dropped": _DROPPED}, has_detail=True),
        Resource(
            "Object",
            Object,
            "/api/objects",
            {
                "missing": (dict[str, str], "{node_id: why} of nodes that did not answer"),
                "summary": (ObjectsSummary, "counts and bytes by node and by reference type"),
                "store": (dict[str, dict[str, Any]], "the object store's use per node"),
            },
        ),
        Resource("LogFile", LogFile, "/api/logs"),
        Resource("Event", Event, "/api/events", {"dropped": _DROPPED}),
        Resource("PlacementGroup", PlacementGroup, "/api/placement_groups", has_detail=True),
        Resource("Job", Job, "/api/jobs/", has_detail=True, paged=False),
    )
}
NODES, WORKERS, ACTORS, TASKS, OBJECTS, LOGS, EVENTS, PLACEMENT_GROUPS, JOBS = RESOURCES.values()
