"""A task's values: its arguments in (deserialized, or read from where they are) and its
return values out (stored for its caller, refs inside them kept alive until the caller
registers as their borrower)."""

from __future__ import annotations

from typing import Any, Protocol

from ember.core_worker.reference_counter import ReferenceCounter
from ember.core_worker.task_spec import ARG_INLINE, TaskSpec
from ember.exceptions import TaskError
from ember.object_ref import ObjectRef
from ember.protocol.connection import Connection
from ember.serialization import META_ERROR, SerializedObject, deserialize, serialize


class ValuesHost(Protocol):
    """What reading arguments and storing returns needs of the core worker."""

    worker_id: bytes
    refs: ReferenceCounter

    def run_sync(self, coro: Any, timeout: float | None) -> Any: ...
    async def connect_to_worker(self, worker_id: bytes | None, address: str) -> Connection: ...
    def register_new_borrows(self) -> None: ...
    def wait_locations(self, refs: list[ObjectRef], timeout: float | None) -> list[tuple]: ...
    def materialize(self, object_id: bytes, loc: tuple) -> Any: ...
    def forget_pin(self, object_id: bytes) -> None: ...
    def store_serialized(
        self, object_id: bytes, ser: SerializedObject, owner: Any, zero_copy: bool = False
    ) -> tuple: ...


def resolve_args(host: ValuesHost, spec: TaskSpec) -> tuple[list, dict]:
    """The task's positional and keyword arguments: inline ones deserialized, refs read
    (pulled, or waited for); an argument that is a failed task's error fails this task."""
    values: list[Any] = []
    refs: list[ObjectRef] = []
    ref_positions: list[int] = []
    for a in spec.args:
        if a[0] == ARG_INLINE:
            value = deserialize(a[2], a[3])
            if a[1] == META_ERROR:
                raise arg_error(value)
            values.append(value)
        else:
            ref_positions.append(len(values))
            refs.append(ObjectRef(a[1], a[2]))
            values.append(None)
    host.register_new_borrows()
    if refs:
        locs = host.wait_locations(refs, None)
        forget = host.forget_pin
        for pos, ref, loc in zip(ref_positions, refs, locs, strict=True):
            try:
                values[pos] = host.materialize(ref._id, loc)
            except TaskError as e:
                raise arg_error(e) from None
            # Its pin goes with the task's last use of it, not a moment later: the
            # caller frees the argument as the task ends and may need its room at once.
            forget(ref._id)
    nkw = len(spec.kwarg_names)
    if nkw:
        kwargs = dict(zip(spec.kwarg_names, values[-nkw:], strict=True))
        return values[:-nkw], kwargs
    return values, {}


def store_returns(host: ValuesHost, spec: TaskSpec, result: Any) -> dict:
    """Stores the task's return values for its caller: ``{"returns", "contained"}``."""
    n = spec.num_returns
    if n == 1:
        values = [result]
    elif n == 0:
        values = []
    else:
        if not isinstance(result, tuple | list) or len(result) != n:
            got = len(result) if isinstance(result, tuple | list) else "a non-sequence"
            raise ValueError(
                f"{spec.display_name()}() was declared with num_returns={n} but returned "
                f"{got}; return a tuple of {n} values."
            )
        values = list(result)
    return _store_values(host, spec, values, spec.return_ids())


def store_partial_returns(host: ValuesHost, spec: TaskSpec, values: list, error_loc: Any) -> dict:
    """The first ``len(values)`` returns hold ``values``; the others ``error_loc``, an
    error already serialized (a static generator that raised part way)."""
    ids = spec.return_ids()
    reply = _store_values(host, spec, values, ids[: len(values)])
    rest = len(ids) - len(values)
    reply["returns"] += [error_loc] * rest
    reply["contained"] += [None] * rest
    return reply


def _store_values(host: ValuesHost, spec: TaskSpec, values: list, ids: list) -> dict:
    returns, contained = [], []
    caller = spec.owner
    for oid, value in zip(ids, values, strict=True):
        ser = serialize(value, what=f"the return value of {spec.display_name()}()")
        returns.append(host.store_serialized(oid, ser, caller))
        if ser.contained:
            register_caller_as_borrower(host, ser.contained, caller)
        contained.append(ser.contained or None)
    return {"returns": returns, "contained": contained}


def register_caller_as_borrower(host: ValuesHost, inner: list, caller: Any) -> None:
    """Refs inside a return value stay alive for the caller until it registers itself."""
    by_owner: dict[bytes, tuple[Any, list[bytes]]] = {}
    for object_id, owner in inner:
        if owner is None or owner[0] == caller[0]:
            continue  # the caller owns it: its own count covers it
        if owner[0] == host.worker_id:
            host.refs.add_borrower(object_id, caller[0])
        else:
            by_owner.setdefault(owner[0], (owner, []))[1].append(object_id)
    if not by_owner:
        return

    async def register() -> None:
        for owner, ids in by_owner.values():
            try:
                conn = await host.connect_to_worker(owner[0], owner[1])
                await conn.call("add_borrower", {"object_ids": ids, "borrower": caller[0]}, 10)
            except Exception:
                pass  # the owner died: the caller will see OwnerDiedError

    host.run_sync(register(), 15.0)


def arg_error(value: Any) -> BaseException:
    """An argument that is a failed task's error: this task fails with that same error."""
    if isinstance(value, TaskError):
        value._from_arg = True
        return value
    if isinstance(value, BaseException):
        return value
    return RuntimeError(f"argument error: {value!r}")
