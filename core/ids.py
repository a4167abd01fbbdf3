"""Identifiers. Raw ``bytes`` inside the runtime (cheap to hash and pickle); hex at the edges.

A task id is a per-process counter that starts at a random point (8 bytes) followed by the
submitting job's id (8 bytes), so making one costs no system call and an id names its job, as
Ray's do (``TaskID.job_id()``, ``ObjectRef.job_id()``); the job comes last, as in Ray's ids,
so an id's first hex digits (what logs and tables show) still tell ids apart. Two processes
of one job collide only if their counters' ranges overlap: about (n1 + n2) / 2**62 for n1
and n2 ids, as unlikely as Ray's 8 hashed bytes. An object id is the id of the task that made
it plus a 4-byte index: return values count up from 1, ``put`` objects set the top bit, so an
object names its producer (lineage, timeline) and its job.
"""

from __future__ import annotations

import itertools
import os
import struct

from ember import global_state

JOB_ID_SIZE = 8
TASK_ID_SIZE = 8 + JOB_ID_SIZE
OBJECT_ID_SIZE = TASK_ID_SIZE + 4
UNIQUE_ID_SIZE = 16
PUT_INDEX_FLAG = 0x8000_0000

# The job part of ids made with no job known (a worker between jobs, a driver's root task
# made before it connects): JobID.nil()'s bytes.
NO_JOB = b"\xff" * JOB_ID_SIZE


def _fresh_counter() -> itertools.count:
    # Below 2**62, so that 2**62 more ids still fit the 8 bytes.
    return itertools.count(int.from_bytes(os.urandom(8), "little") >> 2)


_counter = _fresh_counter()
_pack_q = struct.Struct("<Q").pack
_pack_i = struct.Struct("<I").pack
_unpack_i = struct.Struct("<I").unpack_from


def reseed_after_fork() -> None:
    """A forked child must not repeat its parent's ids."""
    global _counter
    _counter = _fresh_counter()


def new_task_id(job_id: bytes | None = None) -> bytes:
    """A new task id of ``job_id`` (default: the job this process runs now)."""
    if job_id is None:
        worker = global_state.worker  # the job changes per task in a worker: read it each time
        job_id = worker.job_id if worker is not None else NO_JOB
    if not job_id or len(job_id) != JOB_ID_SIZE:
        job_id = NO_JOB  # (an id's length is fixed: object ids are cut from task ids)
    return _pack_q(next(_counter)) + job_id


def job_id_of(id_bytes: bytes) -> bytes:
    """The job part of a task or object id (``NO_JOB`` if it was made outside any job)."""
    return id_bytes[TASK_ID_SIZE - JOB_ID_SIZE : TASK_ID_SIZE]


def new_unique_id() -> bytes:
    return os.urandom(UNIQUE_ID_SIZE)


def object_id_for_return(task_id: bytes, index: int) -> bytes:
    """The id of the task's ``index``-th return value (1-based)."""
    return task_id + _pack_i(index)


def object_id_for_put(task_id: bytes, put_index: int) -> bytes:
    return task_id + _pack_i(PUT_INDEX_FLAG | put_index)


def task_id_of(object_id: bytes) -> bytes:
    return object_id[:TASK_ID_SIZE]


def object_index(object_id: bytes) -> int:
    return _unpack_i(object_id, TASK_ID_SIZE)[0]


def is_put_object(object_id: bytes) -> bool:
    return bool(object_index(object_id) & PUT_INDEX_FLAG)


def actor_handle_object_id(actor_id: bytes) -> bytes:
    """A synthetic object id whose reference count is the actor's handle count."""
    return actor_id[:TASK_ID_SIZE].ljust(TASK_ID_SIZE, b"\0") + b"\xff\xff\xff\xff"


NIL_ID = b"\0" * UNIQUE_ID_SIZE
