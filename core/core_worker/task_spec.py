"""What travels to a worker to run a task, an actor's constructor or an actor method.

Arguments are encoded as ``(ARG_INLINE, meta, data, buffers)`` for values that ride along and
``(ARG_REF, object_id, owner)`` for top-level refs the worker resolves before the call. Refs
nested inside values stay refs (they are inside ``data``) and are listed in ``nested_refs``.
"""

from __future__ import annotations

from typing import Any

NORMAL_TASK, ACTOR_CREATION_TASK, ACTOR_TASK = 0, 1, 2
ARG_INLINE, ARG_REF = 0, 1


class TaskSpec:
    __slots__ = (
        "task_id",
        "job_id",
        "kind",
        "function_id",
        "function_name",
        "function_bytes",
        "args",
        "kwarg_names",
        "num_returns",
        "resources",
        "max_retries",
        "retry_exceptions",
        "owner",
        "actor_id",
        "method_name",
        "seq_no",
        "name",
        "parent_task_id",
        "actor_options",
        "strategy",
        "attempt",
        "nested_refs",
        "gpu_ids",
    )

    def __init__(self, **kw: Any) -> None:
        self.task_id: bytes = kw["task_id"]
        self.job_id: bytes = kw.get("job_id", b"")
        self.kind: int = kw.get("kind", NORMAL_TASK)
        self.function_id: bytes = kw.get("function_id", b"")
        self.function_name: str = kw.get("function_name", "")
        self.function_bytes: bytes | None = kw.get("function_bytes")
        self.args: list = kw.get("args", [])
        self.kwarg_names: tuple[str, ...] = kw.get("kwarg_names", ())
        self.num_returns: int = kw.get("num_returns", 1)
        self.resources: dict[str, float] = kw.get("resources", {})
        self.max_retries: int = kw.get("max_retries", 0)
        self.retry_exceptions: Any = kw.get("retry_exceptions", False)
        self.owner: Any = kw.get("owner")
        self.actor_id: bytes | None = kw.get("actor_id")
        self.method_name: str = kw.get("method_name", "")
        self.seq_no: int = kw.get("seq_no", 0)
        self.name: str = kw.get("name", "")
        self.parent_task_id: bytes = kw.get("parent_task_id", b"")
        self.actor_options: dict | None = kw.get("actor_options")
        self.strategy: Any = kw.get("strategy")
        self.attempt: int = kw.get("attempt", 0)
        self.nested_refs: list = kw.get("nested_refs", [])
        self.gpu_ids: list = kw.get("gpu_ids", [])  # set from the lease that runs it

    def __getstate__(self):
        return tuple(getattr(self, s) for s in self.__slots__)

    def __setstate__(self, state):
        for s, v in zip(self.__slots__, state, strict=True):
            setattr(self, s, v)

    def return_ids(self) -> list[bytes]:
        from ember.ids import object_id_for_return

        return [object_id_for_return(self.task_id, i + 1) for i in range(self.num_returns)]

    def arg_refs(self) -> list[tuple[bytes, Any]]:
        """Every ref this task holds while pending: top-level and nested."""
        refs = [(a[1], a[2]) for a in self.args if a[0] == ARG_REF]
        refs.extend(self.nested_refs)
        return refs

    def display_name(self) -> str:
        return self.name or self.function_name
