"""Values to bytes and back: pickle protocol 5 with out-of-band buffers, cloudpickle for code.

A ``SerializedObject`` is the in-band pickle plus the out-of-band buffers (numpy arrays and
anything else exporting pickle-5 buffers) plus the refs found inside the value. Small objects
travel inside messages as ``(meta, data, buffers)``; large ones are laid out in the node's
shared-memory arena (``pack_into``/``unpack_from``) and read back without a copy.
"""

from __future__ import annotations

import io
import logging
import pickle
import struct
import threading
import types
from collections import ChainMap
from collections.abc import Sequence
from typing import Any

import cloudpickle
from ember.memcopy import copy as copy_bytes

# Metadata: what kind of value the bytes hold.
META_VALUE = 0
META_ERROR = 1  # the value is an exception that ``get`` raises
META_ACTOR_HANDLE = 2  # reserved: the value is an actor handle (for memory views)

BUFFER_ALIGNMENT = 64  # numpy wants aligned data; 64 covers AVX-512 loads
PAGE_ALIGNMENT = 4096
LARGE_BUFFER = 1 << 20

_local = threading.local()
_FAST_TYPES = frozenset({int, float, str, bytes, bool, type(None), complex})
_HEADER = struct.Struct("<IIQ")  # meta, number of buffers, in-band length
_LEN = struct.Struct("<Q")


class SerializationError(TypeError):
    """A value cannot be pickled; the message names its type and where it was found."""


class SerializedObject:
    __slots__ = ("meta", "data", "buffers", "contained")

    def __init__(
        self,
        meta: int,
        data: bytes,
        buffers: list,
        contained: list[tuple[bytes, Any]],
    ) -> None:
        self.meta = meta
        self.data = data
        self.buffers = buffers  # [PickleBuffer | memoryview | bytes]
        self.contained = contained  # [(object_id, owner_address)] of refs inside the value

    @property
    def total_size(self) -> int:
        return len(self.data) + sum(memoryview(b).nbytes for b in self.buffers)

    def to_inline(self) -> tuple[int, bytes, list[bytes]]:
        """The form that travels inside a message."""
        return (self.meta, self.data, [memoryview(b).tobytes() for b in self.buffers])

    def packed_size(self) -> int:
        size = _HEADER.size + _LEN.size * len(self.buffers) + len(self.data)
        for b in self.buffers:
            n = memoryview(b).nbytes
            size = _align(size, n) + n
        return size

    def pack_into(self, dest: memoryview) -> None:
        """Lays the object out in ``dest`` (a writable view of at least packed_size bytes)."""
        views = [
            memoryview(b).cast("B") if memoryview(b).ndim != 1 else memoryview(b)
            for b in self.buffers
        ]
        _HEADER.pack_into(dest, 0, self.meta, len(views), len(self.data))
        pos = _HEADER.size
        for v in views:
            _LEN.pack_into(dest, pos, v.nbytes)
            pos += _LEN.size
        dest[pos : pos + len(self.data)] = self.data
        pos += len(self.data)
        for v in views:
            n = v.nbytes
            pos = _align(pos, n)
            copy_bytes(dest[pos : pos + n], v.cast("B") if v.format != "B" else v)
            pos += n


def _align(n: int, size: int = 0) -> int:
    # Large buffers start on a page: glibc's large-copy path runs at half speed when source
    # and destination sit a few bytes apart within a page (numpy data is 16 bytes in), and
    # page-aligned data maps cleanly. Small ones only need 64 bytes (AVX-512 loads).
    a = PAGE_ALIGNMENT if size >= LARGE_BUFFER else BUFFER_ALIGNMENT
    return (n + a - 1) & ~(a - 1)


def unpack_from(view: memoryview) -> tuple[int, memoryview, list[memoryview]]:
    """Reads a packed object: (meta, in-band data, out-of-band buffers), all views, no copy."""
    meta, nbuf, data_len = _HEADER.unpack_from(view, 0)
    pos = _HEADER.size
    lengths = []
    for _ in range(nbuf):
        lengths.append(_LEN.unpack_from(view, pos)[0])
        pos += _LEN.size
    data = view[pos : pos + data_len]
    pos += data_len
    buffers = []
    for n in lengths:
        pos = _align(pos, n)
        buffers.append(view[pos : pos + n])
        pos += n
    return meta, data, buffers


# -- refs found while pickling ---------------------------------------------------------------
def record_contained_ref(object_id: bytes, owner: Any) -> None:
    found = getattr(_local, "contained", None)
    if found is not None:
        found.append((object_id, owner))


def serialize(value: Any, *, meta: int = META_VALUE, what: str = "the value") -> SerializedObject:
    """Pickles ``value``; raises SerializationError naming the unpicklable part."""
    if type(value) in _FAST_TYPES:
        return SerializedObject(meta, pickle.dumps(value, 5), [], [])
    buffers: list = []
    outer = getattr(_local, "contained", None)
    _local.contained = contained = []
    try:
        data = cloudpickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    except Exception as e:
        raise SerializationError(describe_unpicklable(value, what, e)) from e
    finally:
        _local.contained = outer
        if outer is not None:
            outer.extend(contained)
    return SerializedObject(meta, data, buffers, contained)


def serialize_error(exc: BaseException) -> SerializedObject:
    try:
        return serialize(exc, meta=META_ERROR)
    except SerializationError:
        from ember.exceptions import EmberError

        return serialize(EmberError(f"{type(exc).__name__}: {exc}"), meta=META_ERROR)


def deserialize(data: bytes | memoryview, buffers: Sequence = ()) -> Any:
    return pickle.loads(data, buffers=buffers)


def _code_keeping_its_file(code: types.CodeType) -> tuple:
    """cloudpickle's reduction of a code object, with its real file name back: cloudpickle
    (3.x) writes ``<dynamic-code>``, so a worker's traceback could show neither the file nor
    the line's source, where Ray's shows both."""
    ctor, args = _cloudpickle_code_reduce(code)
    return ctor, tuple(code.co_filename if a == "<dynamic-code>" else a for a in args)


_cloudpickle_code_reduce = getattr(getattr(cloudpickle, "cloudpickle", None), "_code_reduce", None)


class _FunctionPickler(cloudpickle.Pickler):
    if _cloudpickle_code_reduce is not None and isinstance(
        cloudpickle.Pickler.dispatch_table, ChainMap
    ):
        dispatch_table = ChainMap(
            {types.CodeType: _code_keeping_its_file}, cloudpickle.Pickler.dispatch_table
        )


def dumps_function(fn: Any) -> bytes:
    """Pickles a function or class by value where needed (cloudpickle), its code keeping
    the name of the file it was defined in (for the tracebacks of its tasks). ValueError if
    the pickle is too large to send to every worker (``check_function_size``)."""
    try:
        out = io.BytesIO()
        _FunctionPickler(out, protocol=5).dump(fn)
        pickled = out.getvalue()
    except Exception as e:
        raise SerializationError(describe_unpicklable(fn, getattr(fn, "__name__", "it"), e)) from e
    check_function_size(fn, len(pickled))
    return pickled


# Ray's limits on a pickled function or class, which every worker that runs it fetches: a
# warning above the first, ValueError above the second (read when checked, so tests can lower
# them).
FUNCTION_SIZE_WARN_THRESHOLD = 10**7
FUNCTION_SIZE_ERROR_THRESHOLD = 10**8
_MIB = 1024 * 1024


def check_function_size(fn: Any, size: int) -> None:
    """Refuses (or warns about) a function or class whose pickle is ``size`` bytes, naming
    it: a large one is almost always an array captured by accident, which ember.put() would
    send once instead of with the code."""
    if size <= FUNCTION_SIZE_WARN_THRESHOLD:
        return
    # Ray's words: "The actor Counter", "The remote function module.f".
    if isinstance(fn, type):
        kind, name = "actor", fn.__name__
    else:
        kind = "remote function"
        name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    advice = (
        "Check that its definition is not implicitly capturing a large array or other object "
        "in scope. Tip: use ember.put() to put large objects in the object store and pass "
        "the ObjectRef instead."
    )
    if size > FUNCTION_SIZE_ERROR_THRESHOLD:
        raise ValueError(
            f"The {kind} {name} is too large ({size // _MIB} MiB > "
            f"FUNCTION_SIZE_ERROR_THRESHOLD={FUNCTION_SIZE_ERROR_THRESHOLD // _MIB} MiB). "
            f"{advice}"
        )
    logging.getLogger("ember").warning(
        "The %s %s is very large (%d MiB). %s", kind, name, size // _MIB, advice
    )


# -- naming the part that cannot be pickled --------------------------------------------------
def describe_unpicklable(value: Any, what: str, error: BaseException) -> str:
    path, culprit, culprit_error = _find_unpicklable(value, what, 0, set())
    if culprit is None:
        culprit, culprit_error, path = value, error, what
    return (
        f"Could not serialize {what}: {path} is an object of type "
        f"{type(culprit).__module__}.{type(culprit).__qualname__} that cannot be pickled "
        f"({type(culprit_error).__name__}: {culprit_error}). Create it inside the task or "
        f"actor instead of passing it, or give its class __reduce__ / __getstate__."
    )


def _try_pickle(value: Any) -> BaseException | None:
    try:
        cloudpickle.dumps(value, protocol=5, buffer_callback=lambda b: None)
        return None
    except Exception as e:
        return e


def _children(value: Any, path: str):
    if isinstance(value, dict):
        for k, v in value.items():
            yield f"{path}[{k!r}]", v
    elif isinstance(value, (list, tuple, set, frozenset)):
        for i, v in enumerate(value):
            yield f"{path}[{i}]", v
    elif isinstance(value, type):
        for name, member in vars(value).items():
            if callable(member) and hasattr(member, "__code__"):
                yield f"{path}.{name}", member
    else:
        closure = getattr(value, "__closure__", None)
        code = getattr(value, "__code__", None)
        if closure and code is not None:
            for name, cell in zip(code.co_freevars, closure, strict=False):
                try:
                    yield f"{path} (captured variable {name!r})", cell.cell_contents
                except ValueError:
                    continue
        if code is not None:
            globs = getattr(value, "__globals__", {})
            for name in code.co_names:
                if name in globs:
                    yield f"{path} (global {name!r})", globs[name]
        attrs = getattr(value, "__dict__", None)
        if isinstance(attrs, dict):
            for k, v in attrs.items():
                yield f"{path}.{k}", v


def _find_unpicklable(value: Any, path: str, depth: int, seen: set[int]):
    """Descends into the first failing child; returns (path, culprit, error) of the deepest."""
    if depth > 20 or id(value) in seen:
        return path, None, None
    seen.add(id(value))
    err = _try_pickle(value)
    if err is None:
        return path, None, None
    for child_path, child in _children(value, path):
        if _try_pickle(child) is not None:
            p, c, e = _find_unpicklable(child, child_path, depth + 1, seen)
            if c is not None:
                return p, c, e
            return child_path, child, _try_pickle(child)
    return path, value, err
