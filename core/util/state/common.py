"""The rows of the state API as Ray 2.x's ``ray.util.state.common`` has them: one dataclass a
resource, its columns in Ray's order, each marked filterable or not and detail-only or not.

These classes are the one description of the rows: ``ember.util.state`` returns them, the
``ember`` CLI lays them out, and the dashboard's ``/api/v0`` takes its list columns, its
filterable columns and its OpenAPI models from them (``ember.dashboard.ray_state_schema``).

A row reads as Ray's does: ``actor.state`` or ``actor["state"]``, ``actor.get("name")``,
``actor.asdict()`` (and ``dataclasses.asdict``). A detail-only column is ``None`` in a list
asked for without ``detail``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

DEFAULT_RPC_TIMEOUT = 30
DEFAULT_LIMIT = 100
DEFAULT_LOG_LIMIT = 1000

ActorStatus = Literal["DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD"]
TaskStatus = Literal[
    "NIL",
    "PENDING_ARGS_AVAIL",
    "PENDING_NODE_ASSIGNMENT",
    "PENDING_OBJ_STORE_MEM_AVAIL",
    "PENDING_ARGS_FETCH",
    "SUBMITTED_TO_WORKER",
    "PENDING_ACTOR_TASK_ARGS_FETCH",
    "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY",
    "RUNNING",
    "RUNNING_IN_RAY_GET",
    "RUNNING_IN_RAY_WAIT",
    "FINISHED",
    "FAILED",
    "GETTING_AND_PINNING_ARGS",
]
TaskType = Literal["NORMAL_TASK", "ACTOR_CREATION_TASK", "ACTOR_TASK", "DRIVER_TASK"]
WorkerType = Literal["WORKER", "DRIVER", "SPILL_WORKER", "RESTORE_WORKER"]
ExitType = Literal[
    "SYSTEM_ERROR", "INTENDED_SYSTEM_EXIT", "USER_ERROR", "INTENDED_USER_EXIT", "NODE_OUT_OF_MEMORY"
]
ReferenceType = Literal[
    "ACTOR_HANDLE",
    "PINNED_IN_MEMORY",
    "LOCAL_REFERENCE",
    "USED_BY_PENDING_TASK",
    "CAPTURED_IN_OBJECT",
    "UNKNOWN_STATUS",
]
PlacementGroupStatus = Literal["PENDING", "PREPARED", "CREATED", "REMOVED", "RESCHEDULING"]
NodeStatus = Literal["ALIVE", "DEAD"]
JobStatus = Literal["PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"]


class StateApiException(Exception):
    """A state query failed: the dashboard could not be reached or refused the query, or
    (with ``raise_on_missing_output``) its answer lacks rows. Ray's ``RayStateApiException``."""


class ServerUnavailable(StateApiException):
    """The dashboard could not be found or reached."""


def column(*, filterable: bool, detail: bool = False, **kwargs: Any) -> Any:
    """A field that says whether a filter may name it and whether only ``detail`` shows it
    (Ray's ``state_column``). A detail column defaults to ``None``: a list without ``detail``
    does not carry it."""
    if detail:
        kwargs.setdefault("default", None)
    return field(metadata={"filterable": filterable, "detail": detail}, **kwargs)


class StateSchema:
    """What every row class shares: Ray's dict-like access and its column queries."""

    resource: ClassVar[str]  # the endpoint's name: /api/v0/<resource>
    id_key: ClassVar[str | None] = None  # the column a ``get`` looks an id up by

    @classmethod
    def list_columns(cls, detail: bool = True) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if detail or not f.metadata["detail"]]

    @classmethod
    def columns(cls) -> set[str]:
        return set(cls.list_columns(detail=True))

    @classmethod
    def filterable_columns(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cls) if f.metadata["filterable"]}

    @classmethod
    def base_columns(cls) -> set[str]:
        return set(cls.list_columns(detail=False))

    @classmethod
    def detail_columns(cls) -> set[str]:
        return set(cls.list_columns(detail=True))

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> StateSchema:
        """The row of a reply; columns this version does not know are left out, so a newer
        dashboard does not break an older client."""
        known = {f.name for f in dataclasses.fields(cls)}
        missing = {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.name not in row
        }
        values = {k: v for k, v in row.items() if k in known}
        values.update(dict.fromkeys(missing))  # a base column the reply lacks reads as None
        return cls(**values)

    def asdict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    # Ray's rows allow dict-style access (``actor["state"]``); so do these.
    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, key, value)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


@dataclass(kw_only=True)
class ActorState(StateSchema):
    resource: ClassVar[str] = "actors"
    id_key: ClassVar[str | None] = "actor_id"

    actor_id: str = column(filterable=True)
    class_name: str = column(filterable=True)
    state: ActorStatus = column(filterable=True)
    job_id: str = column(filterable=True)
    name: str | None = column(filterable=True)
    node_id: str | None = column(filterable=True)
    pid: int | None = column(filterable=True)
    ray_namespace: str | None = column(filterable=True)
    serialized_runtime_env: str | None = column(filterable=False, detail=True)
    required_resources: dict[str, float] | None = column(filterable=False, detail=True)
    death_cause: dict[str, Any] | None = column(filterable=False, detail=True)
    is_detached: bool | None = column(filterable=False, detail=True)
    placement_group_id: str | None = column(filterable=True, detail=True)
    repr_name: str | None = column(filterable=True, detail=True)
    num_restarts: int | None = column(filterable=False, detail=True)
    num_restarts_due_to_lineage_reconstruction: int | None = column(filterable=False, detail=True)
    num_restarts_due_to_node_preemption: int | None = column(filterable=False, detail=True)
    call_site: str | None = column(filterable=False, detail=True)
    label_selector: dict[str, Any] | None = column(filterable=False, detail=True)
    fallback_strategy: dict[str, Any] | None = column(filterable=False, detail=True)


@dataclass(kw_only=True)
class TaskState(StateSchema):
    resource: ClassVar[str] = "tasks"
    id_key: ClassVar[str | None] = "task_id"

    task_id: str = column(filterable=True)
    attempt_number: int = column(filterable=True)
    name: str = column(filterable=True)
    state: TaskStatus = column(filterable=True)
    job_id: str = column(filterable=True)
    actor_id: str | None = column(filterable=True)
    type: TaskType = column(filterable=True)
    func_or_class_name: str = column(filterable=True)
    parent_task_id: str = column(filterable=True)
    node_id: str | None = column(filterable=True)
    worker_id: str | None = column(filterable=True)
    worker_pid: int | None = column(filterable=True)
    error_type: str | None = column(filterable=True)
    language: str | None = column(filterable=True, detail=True)
    required_resources: dict[str, float] | None = column(filterable=False, detail=True)
    runtime_env_info: dict[str, Any] | None = column(filterable=False, detail=True)
    placement_group_id: str | None = column(filterable=True, detail=True)
    events: list[dict[str, Any]] | None = column(filterable=False, detail=True)
    profiling_data: dict[str, Any] | None = column(filterable=False, detail=True)
    creation_time_ms: int | None = column(filterable=False, detail=True)
    start_time_ms: int | None = column(filterable=False, detail=True)
    end_time_ms: int | None = column(filterable=False, detail=True)
    task_log_info: dict[str, Any] | None = column(filterable=False, detail=True)
    error_message: str | None = column(filterable=False, detail=True)
    is_debugger_paused: bool | None = column(filterable=True, detail=True)
    call_site: str | None = column(filterable=False, detail=True)
    label_selector: dict[str, Any] | None = column(filterable=False, detail=True)
    fallback_strategy: dict[str, Any] | None = column(filterable=False, detail=True)


@dataclass(kw_only=True)
class NodeState(StateSchema):
    resource: ClassVar[str] = "nodes"
    id_key: ClassVar[str | None] = "node_id"

    node_id: str = column(filterable=True)
    node_ip: str = column(filterable=True)
    is_head_node: bool = column(filterable=True)
    state: NodeStatus = column(filterable=True)
    state_message: str | None = column(filterable=False)
    node_name: str = column(filterable=True)
    resources_total: dict[str, float] = column(filterable=False)
    labels: dict[str, str] = column(filterable=False)
    start_time_ms: int | None = column(filterable=False, detail=True)
    end_time_ms: int | None = column(filterable=False, detail=True)


@dataclass(kw_only=True)
class WorkerState(StateSchema):
    resource: ClassVar[str] = "workers"
    id_key: ClassVar[str | None] = "worker_id"

    worker_id: str = column(filterable=True)
    is_alive: bool = column(filterable=True)
    worker_type: WorkerType = column(filterable=True)
    exit_type: ExitType | None = column(filterable=True)
    node_id: str = column(filterable=True)
    ip: str = column(filterable=True)
    pid: int = column(filterable=True)
    exit_detail: str | None = column(filterable=False, detail=True)
    worker_launch_time_ms: int | None = column(filterable=False, detail=True)
    worker_launched_time_ms: int | None = column(filterable=False, detail=True)
    start_time_ms: int | None = column(filterable=False, detail=True)
    end_time_ms: int | None = column(filterable=False, detail=True)
    debugger_port: int | None = column(filterable=True, detail=True)
    num_paused_threads: int | None = column(filterable=True, detail=True)


@dataclass(kw_only=True)
class ObjectState(StateSchema):
    resource: ClassVar[str] = "objects"
    id_key: ClassVar[str | None] = "object_id"

    object_id: str = column(filterable=True)
    object_size: int = column(filterable=True)  # bytes; -1: not known
    task_status: TaskStatus = column(filterable=True)
    attempt_number: int = column(filterable=True)
    reference_type: ReferenceType = column(filterable=True)
    call_site: str = column(filterable=True)
    type: WorkerType = column(filterable=True)
    pid: int = column(filterable=True)
    ip: str = column(filterable=True)


@dataclass(kw_only=True)
class PlacementGroupState(StateSchema):
    resource: ClassVar[str] = "placement_groups"
    id_key: ClassVar[str | None] = "placement_group_id"

    placement_group_id: str = column(filterable=True)
    name: str = column(filterable=True)
    creator_job_id: str = column(filterable=True)
    state: PlacementGroupStatus = column(filterable=True)
    bundles: list[dict[str, Any]] | None = column(filterable=False, detail=True)
    is_detached: bool | None = column(filterable=True, detail=True)
    stats: dict[str, Any] | None = column(filterable=False, detail=True)
    topology_strategy: dict[str, Any] | None = column(filterable=False, detail=True)
    topology_assignments: dict[str, Any] | None = column(filterable=False, detail=True)


@dataclass(kw_only=True)
class DriverInfo:
    """A driver job's driver (Ray's ``DriverInfo``: ``job.driver_info.pid``)."""

    id: str
    node_ip_address: str
    pid: str

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


@dataclass(kw_only=True)
class JobState(StateSchema):
    resource: ClassVar[str] = "jobs"
    # Ray gets a job by its submission id; Ember's jobs are drivers' (no submission id), so
    # ``get_job`` also takes a job id (``api.get_job``).
    id_key: ClassVar[str | None] = "submission_id"
    # Ray's list columns of a job, not its field order (Ray's ``JobState.list_columns``).
    LIST_COLUMNS: ClassVar[tuple[str, ...]] = (
        "job_id",
        "submission_id",
        "entrypoint",
        "type",
        "status",
        "message",
        "error_type",
        "driver_info",
    )

    type: Literal["SUBMISSION", "DRIVER"] = column(filterable=True)
    job_id: str | None = column(filterable=True, default=None)
    submission_id: str | None = column(filterable=True, default=None)
    driver_info: DriverInfo | None = column(filterable=False, default=None)
    status: JobStatus = column(filterable=True)
    entrypoint: str = column(filterable=False)
    message: str | None = column(filterable=False, default=None)
    error_type: str | None = column(filterable=False, default=None)
    start_time: int | None = column(filterable=False, detail=True)
    end_time: int | None = column(filterable=False, detail=True)
    metadata: dict[str, str] | None = column(filterable=False, detail=True)
    runtime_env: dict[str, Any] | None = column(filterable=False, detail=True)
    driver_agent_http_address: str | None = column(filterable=False, detail=True)
    driver_node_id: str | None = column(filterable=False, detail=True)
    driver_exit_code: int | None = column(filterable=False, detail=True)

    @classmethod
    def list_columns(cls, detail: bool = True) -> list[str]:
        return super().list_columns(True) if detail else list(cls.LIST_COLUMNS)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> StateSchema:
        info = row.get("driver_info")
        if isinstance(info, dict):
            row = {**row, "driver_info": DriverInfo(**info)}
        return super().from_row(row)


@dataclass(kw_only=True)
class RuntimeEnvState(StateSchema):
    resource: ClassVar[str] = "runtime_envs"

    runtime_env: dict[str, Any] = column(filterable=True)
    success: bool = column(filterable=True)
    creation_time_ms: float | None = column(filterable=False)
    node_id: str = column(filterable=True)
    ref_cnt: int | None = column(filterable=False, detail=True)
    error: str | None = column(filterable=True, detail=True)


@dataclass(kw_only=True)
class ClusterEventState(StateSchema):
    resource: ClassVar[str] = "cluster_events"

    severity: str = column(filterable=True)
    time: str = column(filterable=False)
    source_type: str = column(filterable=True)
    message: str = column(filterable=False)
    event_id: str = column(filterable=True)
    custom_fields: dict[str, Any] | None = column(filterable=False, detail=True)


SCHEMAS: dict[str, type[StateSchema]] = {
    s.resource: s
    for s in (
        ActorState,
        TaskState,
        NodeState,
        WorkerState,
        ObjectState,
        JobState,
        PlacementGroupState,
        RuntimeEnvState,
        ClusterEventState,
    )
}
