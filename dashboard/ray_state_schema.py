"""The rows and replies of Ray's state API (``/api/v0/...``) as pydantic models.

Ray's own clients (``ray list``, ``ray get``, ``ray summary``, ``ray.util.state``) build their
typed dataclasses from these rows with ``Schema(**row)`` and validate every value, so the
field names, the types and the enumerated values here are Ray's. The models document the
replies in the OpenAPI spec; the routes serialise plain dicts built to match them.

Each resource's ``Resource`` says which columns a list shows without ``detail`` (the rest
appear with ``detail=true``), which columns a filter may name, and the column a
``ray get`` looks an id up by.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

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


class ActorState(BaseModel):
    actor_id: str
    class_name: str
    state: ActorStatus
    job_id: str
    name: str | None
    node_id: str | None
    pid: int | None
    ray_namespace: str | None
    serialized_runtime_env: str | None = None
    required_resources: dict[str, float] | None = None
    death_cause: dict[str, Any] | None = None
    is_detached: bool | None = None
    placement_group_id: str | None = None
    repr_name: str | None = None
    num_restarts: int | None = None
    num_restarts_due_to_lineage_reconstruction: int | None = None
    num_restarts_due_to_node_preemption: int | None = None
    call_site: str | None = None
    label_selector: dict[str, Any] | None = None
    fallback_strategy: dict[str, Any] | None = None


class TaskState(BaseModel):
    task_id: str
    attempt_number: int
    name: str
    state: TaskStatus
    job_id: str
    actor_id: str | None
    type: TaskType
    func_or_class_name: str
    parent_task_id: str
    node_id: str | None
    worker_id: str | None
    worker_pid: int | None
    error_type: str | None
    language: str | None = None
    required_resources: dict[str, float] | None = None
    runtime_env_info: dict[str, Any] | None = None
    placement_group_id: str | None = None
    events: list[dict[str, Any]] | None = None
    profiling_data: dict[str, Any] | None = None
    creation_time_ms: int | None = None
    start_time_ms: int | None = None
    end_time_ms: int | None = None
    task_log_info: dict[str, Any] | None = None
    error_message: str | None = None
    is_debugger_paused: bool | None = None
    call_site: str | None = None
    label_selector: dict[str, Any] | None = None
    fallback_strategy: dict[str, Any] | None = None


class NodeState(BaseModel):
    node_id: str
    node_ip: str
    is_head_node: bool
    state: Literal["ALIVE", "DEAD"]
    state_message: str | None
    node_name: str
    resources_total: dict[str, float]
    labels: dict[str, str]
    start_time_ms: int | None = None
    end_time_ms: int | None = None


class WorkerState(BaseModel):
    worker_id: str
    is_alive: bool
    worker_type: WorkerType
    exit_type: ExitType | None
    node_id: str
    ip: str
    pid: int
    exit_detail: str | None = None
    worker_launch_time_ms: int | None = None
    worker_launched_time_ms: int | None = None
    start_time_ms: int | None = None
    end_time_ms: int | None = None
    debugger_port: int | None = None
    num_paused_threads: int | None = None


class ObjectState(BaseModel):
    object_id: str
    object_size: int
    task_status: TaskStatus
    attempt_number: int
    reference_type: ReferenceType
    call_site: str
    type: WorkerType
    pid: int
    ip: str


class PlacementGroupState(BaseModel):
    placement_group_id: str
    name: str
    creator_job_id: str
    state: PlacementGroupStatus
    bundles: list[dict[str, Any]] | None = None
    is_detached: bool | None = None
    stats: dict[str, Any] | None = None


class DriverInfo(BaseModel):
    id: str
    node_ip_address: str
    pid: str


class JobState(BaseModel):
    type: Literal["SUBMISSION", "DRIVER"]
    job_id: str | None = None
    submission_id: str | None = None
    driver_info: DriverInfo | None = None
    status: Literal["PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"]
    entrypoint: str
    message: str | None = None
    error_type: str | None = None
    start_time: int | None = None
    end_time: int | None = None
    metadata: dict[str, str] | None = None
    runtime_env: dict[str, Any] | None = None
    driver_agent_http_address: str | None = None
    driver_node_id: str | None = None
    driver_exit_code: int | None = None


class RuntimeEnvState(BaseModel):
    runtime_env: dict[str, Any]
    success: bool
    creation_time_ms: float | None
    node_id: str
    ref_cnt: int | None = None
    error: str | None = None


class ClusterEventState(BaseModel):
    severity: str
    time: str
    source_type: str
    message: str
    event_id: str
    custom_fields: dict[str, Any] | None = None


@dataclass(frozen=True)
class Resource:
    """One listable resource: its row model, the columns shown without ``detail``, the
    columns a filter may name, and the id column ``ray get`` filters on."""

    name: str
    model: type[BaseModel]
    base: tuple[str, ...]
    filterable: frozenset[str]
    id_key: str | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self.model.model_fields)

    def shown(self, detail: bool) -> tuple[str, ...]:
        return self.columns if detail else self.base

    def column_type(self, column: str) -> type | None:
        """``int``, ``bool``, ``float`` or ``str`` for a scalar column (``None`` otherwise):
        how a filter's text value is read."""
        annotation = self.model.model_fields[column].annotation
        args = typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            scalars = [a for a in args if a is not type(None)]
            annotation = scalars[0] if len(scalars) == 1 else None
        if typing.get_origin(annotation) is Literal:
            return str
        return annotation if annotation in (int, bool, float, str) else None


def _base(model: type[BaseModel]) -> tuple[str, ...]:
    # Ray's list columns are the fields without a default; the rest are ``detail`` columns.
    return tuple(n for n, f in model.model_fields.items() if f.is_required())


RESOURCES: dict[str, Resource] = {
    r.name: r
    for r in (
        Resource(
            "actors",
            ActorState,
            _base(ActorState),
            frozenset(
                {
                    "actor_id",
                    "class_name",
                    "job_id",
                    "name",
                    "node_id",
                    "pid",
                    "placement_group_id",
                    "ray_namespace",
                    "repr_name",
                    "state",
                }
            ),
            "actor_id",
        ),
        Resource(
            "tasks",
            TaskState,
            _base(TaskState),
            frozenset(
                {
                    "actor_id",
                    "attempt_number",
                    "error_type",
                    "func_or_class_name",
                    "is_debugger_paused",
                    "job_id",
                    "language",
                    "name",
                    "node_id",
                    "parent_task_id",
                    "placement_group_id",
                    "state",
                    "task_id",
                    "type",
                    "worker_id",
                    "worker_pid",
                }
            ),
            "task_id",
        ),
        Resource(
            "nodes",
            NodeState,
            _base(NodeState),
            frozenset({"is_head_node", "node_id", "node_ip", "node_name", "state"}),
            "node_id",
        ),
        Resource(
            "workers",
            WorkerState,
            _base(WorkerState),
            frozenset(
                {
                    "debugger_port",
                    "exit_type",
                    "ip",
                    "is_alive",
                    "node_id",
                    "num_paused_threads",
                    "pid",
                    "worker_id",
                    "worker_type",
                }
            ),
            "worker_id",
        ),
        Resource(
            "objects",
            ObjectState,
            _base(ObjectState),
            frozenset(
                {
                    "attempt_number",
                    "call_site",
                    "ip",
                    "object_id",
                    "object_size",
                    "pid",
                    "reference_type",
                    "task_status",
                    "type",
                }
            ),
            "object_id",
        ),
        Resource(
            "placement_groups",
            PlacementGroupState,
            _base(PlacementGroupState),
            frozenset({"creator_job_id", "is_detached", "name", "placement_group_id", "state"}),
            "placement_group_id",
        ),
        Resource(
            "jobs",
            JobState,
            (
                "job_id",
                "submission_id",
                "entrypoint",
                "type",
                "status",
                "message",
                "error_type",
                "driver_info",
            ),
            frozenset({"job_id", "type", "status", "submission_id"}),
            "submission_id",
        ),
        Resource(
            "runtime_envs",
            RuntimeEnvState,
            _base(RuntimeEnvState),
            frozenset({"error", "node_id", "runtime_env", "success"}),
        ),
        Resource(
            "cluster_events",
            ClusterEventState,
            _base(ClusterEventState),
            frozenset({"event_id", "severity", "source_type"}),
        ),
    )
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
    """An error, as Ray's clients read it: ``result`` false and ``msg`` saying why."""

    result: Literal[False]
    msg: str
    data: dict[str, Any] = {}
