"""Ray's id classes (``ray.JobID``, ``ray.NodeID``, ``ray.WorkerID``, ``ray.TaskID``,
``ray.ActorID``, ``ray.PlacementGroupID``): a value object over the id's bytes with
``hex()``, ``binary()``, ``from_hex``, ``nil``/``is_nil``, equal and hashable by type and
bytes. The runtime context's ``job_id``, ``node_id``, ``task_id`` and ``actor_id``
properties return them, as Ray's do (its ``get_*_id()`` methods return the hex text)."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from ember.ids import job_id_of

T = TypeVar("T", bound="BaseID")


class BaseID:
    __slots__ = ("_bytes",)
    SIZE: ClassVar[int] = 16

    def __init__(self, id_bytes: bytes) -> None:
        if not isinstance(id_bytes, bytes):
            raise TypeError(f"{type(self).__name__} takes bytes, not {type(id_bytes).__name__}")
        self._bytes = id_bytes

    @classmethod
    def from_hex(cls: type[T], hex_id: str) -> T:
        return cls(bytes.fromhex(hex_id))

    @classmethod
    def from_binary(cls: type[T], id_bytes: bytes) -> T:
        return cls(id_bytes)

    @classmethod
    def nil(cls: type[T]) -> T:
        return cls(b"\xff" * cls.SIZE)

    @classmethod
    def size(cls) -> int:
        return cls.SIZE

    def is_nil(self) -> bool:
        return self._bytes == b"\xff" * len(self._bytes)

    def hex(self) -> str:
        return self._bytes.hex()

    def binary(self) -> bytes:
        return self._bytes

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and other._bytes == self._bytes

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._bytes))

    def __str__(self) -> str:
        return self.hex()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.hex()})"

    def __reduce__(self) -> tuple:
        return (type(self), (self._bytes,))


class JobID(BaseID):
    __slots__ = ()
    SIZE = 8


class NodeID(BaseID):
    __slots__ = ()


class WorkerID(BaseID):
    __slots__ = ()


class TaskID(BaseID):
    __slots__ = ()

    def job_id(self) -> JobID:
        """The job that submitted the task: a task id holds its job's (``ember.ids``)."""
        return JobID(job_id_of(self._bytes))


class ActorID(BaseID):
    __slots__ = ()


class PlacementGroupID(BaseID):
    __slots__ = ()
