"""``ember.util.state``: Ray 2.x's ``ray.util.state`` over Ember's dashboard.

``list_*`` / ``get_*`` / ``summarize_*`` / ``list_logs`` / ``get_log`` with Ray's signatures
and results; rows are the dataclasses of ``ember.util.state.common`` (attribute and
dict-style access, ``asdict()``); failures raise ``StateApiException``.
"""

from __future__ import annotations

from ember.util.state.api import (
    ListResult,
    StateClient,
    get_actor,
    get_job,
    get_node,
    get_objects,
    get_placement_group,
    get_task,
    get_worker,
    list_actors,
    list_cluster_events,
    list_jobs,
    list_nodes,
    list_objects,
    list_placement_groups,
    list_runtime_envs,
    list_tasks,
    list_workers,
    summarize_actors,
    summarize_objects,
    summarize_tasks,
)
from ember.util.state.common import (
    ActorState,
    ClusterEventState,
    JobState,
    NodeState,
    ObjectState,
    PlacementGroupState,
    RuntimeEnvState,
    ServerUnavailable,
    StateApiException,
    TaskState,
    WorkerState,
)
from ember.util.state.logs import get_log, list_logs

# Ray's name for the exception, for programs that catch it by that name.
RayStateApiException = StateApiException

__all__ = [
    "ActorState",
    "ClusterEventState",
    "JobState",
    "ListResult",
    "NodeState",
    "ObjectState",
    "PlacementGroupState",
    "RayStateApiException",
    "RuntimeEnvState",
    "ServerUnavailable",
    "StateApiException",
    "StateClient",
    "TaskState",
    "WorkerState",
    "get_actor",
    "get_job",
    "get_log",
    "get_node",
    "get_objects",
    "get_placement_group",
    "get_task",
    "get_worker",
    "list_actors",
    "list_cluster_events",
    "list_jobs",
    "list_logs",
    "list_nodes",
    "list_objects",
    "list_placement_groups",
    "list_runtime_envs",
    "list_tasks",
    "list_workers",
    "summarize_actors",
    "summarize_objects",
    "summarize_tasks",
]
