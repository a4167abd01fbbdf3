"""Identifiers. Raw ``bytes`` inside the runtime (cheap to hash and pickle); hex at the edges.

A task id is a per-process random prefix plus a counter, so making one costs no system call.
An object id is the id of the task that made it plus a 4-byte index: return values count up
from 1, ``put`` objects set the top bit, so an object names its producer (lineage, timeline).
"""

from __future__ import annotations

import itertools
import os
import struct

TASK_ID_SIZE = 16
OBJECT_ID_SIZE = TASK_ID_SIZE + 4
UNIQUE_ID_SIZE = 16
PUT_INDEX_FLAG = 0x8000_0000

_prefix = os.urandom(8)
_counter = itertools.count(1)
_pack_q = struct.Struct("<Q").pack
_pack_i = struct.Struct("<I").pack
_unpack_i = struct.Struct("<I").unpack_from


def reseed_after_fork() -> None:
    """A forked child must not repeat its parent's ids."""
    global _prefix, _counter
    _prefix = os.urandom(8)
    _counter = itertools.count(1)


def new_task_id() -> bytes:
    return _prefix + _pack_q(next(_counter))


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
