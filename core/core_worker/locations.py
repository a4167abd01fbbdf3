"""What the memory store holds for an object: where its value is, or the error it stands for.

A location is ``("inline", meta, data, buffers)`` (the serialized value itself) or
``("plasma", node_id, size)`` (in that node's shared-memory store). A failed or lost object
holds an inline error, which ``get`` raises.
"""

from __future__ import annotations

from ember.exceptions import ObjectLostError
from ember.serialization import serialize_error


def error_location(error: BaseException) -> tuple:
    """An inline location holding ``error``: reading the object raises it."""
    ser = serialize_error(error)
    return ("inline", ser.meta, ser.data, [])


def lost_location(
    object_id: bytes, cls: type[ObjectLostError] = ObjectLostError, reason: str = ""
) -> tuple:
    """The location of an object that cannot be had: ``cls`` saying why."""
    return error_location(cls(object_id.hex(), reason or "its owner died"))
