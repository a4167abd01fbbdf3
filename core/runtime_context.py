"""What the current process is running: ``ember.get_runtime_context()`` (the ids of the job,
node, task, actor and worker) and ``ember.get_gpu_ids()``."""

from __future__ import annotations

import os
from typing import Any

from ember.core_worker.core_worker import DRIVER
from ember.driver import current_worker
from ember.id_types import ActorID, JobID, NodeID, TaskID


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
