"""What travels to a worker to run a task, an actor's constructor or an actor method.

Arguments are encoded as ``(ARG_INLINE, meta, data, buffers)`` for values that ride along and
``(ARG_REF, object_id, owner)`` for top-level refs the worker resolves before the call. Refs
nested inside values stay refs (they are inside ``data``) and are listed in ``nested_refs``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

NORMAL_TASK, ACTOR_CREATION_TASK, ACTOR_TASK = 0, 1, 2
ARG_INLINE, ARG_REF = 0, 1
# A generator task's kind of returns (``TaskSpec.generator``; ``core_worker/generators.py``):
# items streamed to the caller as they are yielded, all of them behind one ref, or a
# fixed number of returns, one per item.
GEN_STREAMING, GEN_DYNAMIC, GEN_STATIC = 1, 2, 3


class TaskSpec:
    """Fields not given keep the class defaults below, so a spec pickles only what it sets."""

    task_id: bytes
    job_id: bytes = b""
    kind: int = NORMAL_TASK
    function_id: bytes = b""
    function_name: str = ""
    function_bytes: bytes | None = None  # the pickled function, the first time a worker sees it
    args: list = []  # [(ARG_INLINE, meta, data, buffers) | (ARG_REF, object_id, owner)]
    kwarg_names: tuple = ()
    num_returns: int = 1
    resources: dict = {}
    max_retries: int = 0
    retry_exceptions: Any = False
    owner: Any = None  # (worker_id, address, node_id) of the submitter
    actor_id: bytes | None = None
    method_name: str = ""
    seq_no: int = 0
    name: str = ""
    parent_task_id: bytes = b""
    actor_options: dict | None = None
    strategy: Any = None
    attempt: int = 0
    oom_retries: int = 0  # attempts the memory monitor ended: not counted in max_retries
    nested_refs: list = []  # [(object_id, owner)] of refs inside argument values
    gpu_ids: list = []  # set from the lease that runs it
    namespace: str = ""  # the job's namespace, where get_actor() looks inside the task
    code_path: list | None = None  # the driver's import dirs, sent with the function bytes
    concurrency_group: str = ""  # an actor call's group (concurrency_groups.py)
    runtime_env: dict | None = None  # a task's or actor's, merged with its parent's
    generator: int = 0  # GEN_*: a generator function's returns; 0: an ordinary task
    generator_skip: int = 0  # items its caller already has: a retry does not send them again
    behind: bool = False  # pushed behind a running task: its worker may give it back unstarted

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)

    def __getstate__(self) -> dict:
        # Only the owner decides on retries. The classes of retry_exceptions may live in the
        # driver's __main__, which a worker cannot import: sent, they made its unpickling of
        # the whole spec fail (the worker died, the call hung).
        state = self.__dict__
        if "retry_exceptions" in state and isinstance(state["retry_exceptions"], (list, tuple)):
            state = {**state, "retry_exceptions": True}
        return state

    # A pushed task travels as its fields, a plain dict: pickling the dict skips the class's
    # reduce protocol (a Python ``__getstate__`` call and the class's name in every frame),
    # half the cost of encoding the spec and of decoding it on the worker.
    to_wire = __getstate__

    @classmethod
    def from_wire(cls, fields: dict) -> TaskSpec:
        spec = cls.__new__(cls)
        spec.__dict__ = fields
        return spec

    def set_optional(
        self,
        args: list,
        kwarg_names: tuple,
        num_returns: int,
        nested_refs: list,
        name: str | None,
        retry_exceptions: Any,
    ) -> None:
        """Sets the fields any submit may give, each only when it is not the class default:
        a spec pickles the fields it sets, and each costs its submitter and its worker on
        every call."""
        fields = self.__dict__
        if args:  # most calls of a method without arguments: no list of its own to pickle
            fields["args"] = args
        if kwarg_names:
            fields["kwarg_names"] = kwarg_names
        if num_returns != 1:
            fields["num_returns"] = num_returns
        if nested_refs:
            fields["nested_refs"] = nested_refs
        if name:
            fields["name"] = name
        if retry_exceptions:
            fields["retry_exceptions"] = retry_exceptions

    def return_ids(self) -> list[bytes]:
        tid = self.task_id
        n = self.num_returns
        if n == 1:
            return [tid + _RETURN_ONE]
        if n <= len(_RETURN_INDEX):
            return [tid + _RETURN_INDEX[i] for i in range(n)]
        return [tid + struct.pack("<I", i + 1) for i in range(n)]

    def arg_refs(self) -> list[tuple[bytes, Any]]:
        """Every ref this task holds while pending: top-level and nested."""
        refs = [(a[1], a[2]) for a in self.args if a[0] == ARG_REF]
        if self.nested_refs:
            refs.extend(self.nested_refs)
        return refs

    def display_name(self) -> str:
        return self.name or self.function_name


_RETURN_INDEX = [struct.pack("<I", i + 1) for i in range(4096)]
_RETURN_ONE = _RETURN_INDEX[0]


def owned_args_pending(
    spec: TaskSpec, owns: Callable[[bytes], bool], ready: Callable[[bytes], Any]
) -> list[bytes]:
    """The spec's top-level argument refs owned here (``owns``) whose values are not in
    the memory store yet (``ready`` gives None): what its submitter waits for first."""
    if not spec.args:
        return []
    return [a[1] for a in spec.args if a[0] == ARG_REF and owns(a[1]) and not ready(a[1])]
