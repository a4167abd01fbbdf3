"""What the current process is running: ``ember.get_runtime_context()`` (the ids of the job,
node, task, actor and worker), ``ember.get_gpu_ids()`` and
``ember.util.get_node_ip_address()``."""

from __future__ import annotations

import json
import os
from typing import Any

from ember import global_state
from ember.core_worker.core_worker import DRIVER
from ember.driver import current_worker
from ember.id_types import ActorID, JobID, NodeID, PlacementGroupID, TaskID
from ember.labels import node_labels
from ember.runtime_env import RuntimeEnv
from ember.util.placement_group import running_strategy


def get_runtime_context() -> RuntimeContext:
    return RuntimeContext(current_worker())


def get_gpu_ids() -> list[int]:
    """The GPU ids assigned to the current task or actor (the driver: all it may see)."""
    worker = current_worker()
    spec = getattr(worker.current, "spec", None) if not worker.local_mode else None
    if spec is not None and spec.gpu_ids:
        return list(spec.gpu_ids)
    executor = getattr(worker, "executor", None)
    actor_spec = getattr(executor, "actor_spec", None)
    if actor_spec is not None and actor_spec.gpu_ids:
        return list(actor_spec.gpu_ids)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if getattr(worker, "mode", DRIVER) == DRIVER and visible:
        return [int(x) for x in visible.split(",") if x.strip().isdigit()]
    return []


def get_node_ip_address(address: str | None = None) -> str:
    """This node's IP address (Ray's ``ray.util.get_node_ip_address``): the one its node
    registered with (what ``ember.nodes()`` shows) in a connected process; else the source
    address of the route to ``address`` ("host" or "host:port"; default: the outside world).
    """
    node_ip = (getattr(global_state.worker, "node", None) or {}).get("node_ip")
    if node_ip:
        return node_ip
    from ember.node import node_ip_for  # process launching: only for a process not connected

    return node_ip_for(address.rsplit(":", 1)[0] if address else None)


class RuntimeContext:
    def __init__(self, worker: Any) -> None:
        self._worker = worker

    def get_job_id(self) -> str:
        return self._worker.job_id.hex()

    def get_node_id(self) -> str:
        return self._worker.node_id.hex()

    def get_worker_id(self) -> str:
        return self._worker.worker_id.hex()

    def get_task_id(self) -> str | None:
        task_id = getattr(self._worker.current, "task_id", None)
        return task_id.hex() if task_id else None

    def get_actor_id(self) -> str | None:
        actor_id = getattr(self._worker, "actor_id", None)
        return actor_id.hex() if actor_id else None

    @property
    def gcs_address(self) -> str:
        return (getattr(self._worker, "node", None) or {}).get("gcs_address", "")

    @property
    def namespace(self) -> str:
        return self._worker.namespace

    def get_namespace(self) -> str:
        return self._worker.namespace

    # Ray's deprecated properties return id objects (``.hex()``); the ``get_*`` methods, text.
    @property
    def job_id(self) -> JobID:
        return JobID(self._worker.job_id)

    @property
    def node_id(self) -> NodeID:
        return NodeID(self._worker.node_id)

    @property
    def task_id(self) -> TaskID | None:
        task_id = getattr(self._worker.current, "task_id", None)
        return TaskID(task_id) if task_id else None

    @property
    def actor_id(self) -> ActorID | None:
        actor_id = getattr(self._worker, "actor_id", None)
        return ActorID(actor_id) if actor_id else None

    def get_task_name(self) -> str | None:
        """The running task's name (``f``, ``Class.method``, or its ``name=`` option); None
        in a driver."""
        spec = getattr(self._worker.current, "spec", None)
        return spec.display_name() if spec is not None else None

    def get_task_function_name(self) -> str | None:
        spec = getattr(self._worker.current, "spec", None)
        return spec.function_name if spec is not None else None

    @property
    def was_current_actor_reconstructed(self) -> bool:
        """True in an actor the GCS restarted after its process died (its constructor
        included), as Ray's; asked of the GCS once per actor process, so creating an actor
        costs nothing more."""
        executor = getattr(self._worker, "executor", None)
        spec = getattr(executor, "actor_spec", None)
        if spec is None:
            return False
        if (
            getattr(executor, "shared", None) is not None
        ):  # a shared-process actor: its own restarts
            return spec.attempt > 0
        if executor.actor_restarted is None:
            info = self._worker.call_gcs_sync(
                "get_actor_info", {"actor_id": spec.actor_id}, timeout=30
            )
            executor.actor_restarted = spec.attempt > 0 or bool((info or {}).get("num_restarts"))
        return executor.actor_restarted

    def get_assigned_resources(self) -> dict[str, float]:
        """What the running task or actor holds while it runs (Ray's rule: a task's CPU,
        default 1; an actor's, default 0 once created), GPUs and custom resources included."""
        spec = getattr(self._worker.current, "spec", None)
        executor = getattr(self._worker, "executor", None)
        actor_spec = getattr(executor, "actor_spec", None)
        if actor_spec is not None:
            spec = actor_spec  # an actor's calls hold what the actor holds
        if spec is None:
            return {}
        return {k: float(v) for k, v in spec.resources.items() if v}

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        return {"GPU": [str(g) for g in get_gpu_ids()]}

    @property
    def current_actor(self) -> Any:
        """A handle to the actor this code runs in (Ray's ``current_actor``)."""
        actor_id = getattr(self._worker, "actor_id", None)
        if actor_id is None:
            raise RuntimeError("This method is only available in an actor.")
        from ember.actor import current_actor_handle

        return current_actor_handle(self._worker)

    # -- Ray's other accessors: the actor's name, the placement group, the node, the
    # -- session, the runtime_env and the cancel flag --------------------------------------
    def _actor_spec(self) -> Any:
        return getattr(getattr(self._worker, "executor", None), "actor_spec", None)

    def get_actor_name(self) -> str | None:
        """The actor's name ("" for an unnamed actor); None in a driver or a task."""
        spec = self._actor_spec()
        if spec is None or getattr(self._worker, "actor_id", None) is None:
            return None
        return (spec.actor_options or {}).get("name") or ""

    def _group_strategy(self) -> tuple | None:
        strategy = running_strategy(self._worker)
        if isinstance(strategy, tuple) and strategy and strategy[0] == "PLACEMENT_GROUP":
            return strategy
        return None

    def get_placement_group_id(self) -> str | None:
        """The hex id of the placement group the task or actor runs in; else None."""
        strategy = self._group_strategy()
        return strategy[1].hex() if strategy else None

    @property
    def current_placement_group_id(self) -> PlacementGroupID:
        """Ray's deprecated id object of the current group (nil outside any)."""
        strategy = self._group_strategy()
        return PlacementGroupID(strategy[1]) if strategy else PlacementGroupID.nil()

    @property
    def should_capture_child_tasks_in_placement_group(self) -> bool:
        """Whether what this task or actor submits runs in its placement group too."""
        strategy = self._group_strategy()
        return bool(strategy and len(strategy) > 3 and strategy[3])

    def get_node_labels(self) -> dict[str, str]:
        """This node's labels, the runtime's own (``ray.io/node-id``) included."""
        node_id = self._worker.node_id
        for n in self._worker.call_gcs_sync("list_nodes", None) or ():
            if n["node_id"] == node_id:
                return node_labels(node_id.hex(), n.get("labels"))
        return node_labels(node_id.hex(), None)

    def _session_dir(self) -> str:
        return ((getattr(self._worker, "node", None) or {}).get("session_dir") or "").rstrip("/")

    def get_session_name(self) -> str:
        """The session's name: ``session_<date>_<pid>``, its directory's."""
        return os.path.basename(self._session_dir())

    def get_temp_dir(self) -> str:
        """The node's temp root, which holds its session directories."""
        return os.path.dirname(self._session_dir())

    def _runtime_env(self) -> dict[str, Any]:
        spec = getattr(self._worker.current, "spec", None)
        if spec is None or spec.kind != 0:
            spec = self._actor_spec()
        if spec is not None:
            return spec.runtime_env or {}
        return getattr(self._worker, "job_runtime_env", None) or {}

    def get_runtime_env_string(self) -> str:
        """The runtime_env this code runs with, as JSON (local paths as their packages'
        URIs); ``"{}"`` for none."""
        return json.dumps(self._runtime_env())

    @property
    def runtime_env(self) -> RuntimeEnv:
        return RuntimeEnv(**self._runtime_env())

    def is_canceled(self) -> bool:
        """Whether ``cancel`` was called on the running task (for a task that checks rather
        than being interrupted). RuntimeError in a driver or an async actor, as in Ray."""
        if getattr(self._worker, "mode", DRIVER) == DRIVER:
            raise RuntimeError("is_canceled() is only available in a task or actor, not a driver.")
        executor = getattr(self._worker, "executor", None)
        if getattr(executor, "async_loop", None) is not None:
            raise RuntimeError("is_canceled() is not supported in an async actor.")
        task_id = getattr(self._worker.current, "task_id", None)
        return task_id is not None and task_id in getattr(executor, "cancelled", ())

    def get(self) -> dict[str, Any]:
        """Ray's summary: id objects, and the task and actor only where there are some."""
        out: dict[str, Any] = {
            "job_id": self.job_id,
            "node_id": self.node_id,
            "namespace": self.namespace,
        }
        if self.task_id is not None:
            out["task_id"] = self.task_id
        if self.actor_id is not None:
            out["actor_id"] = self.actor_id
        return out
