"""The client side of the shared-memory arena, against real files in /dev/shm."""

from __future__ import annotations

import gc
import os
import pickle
import stat
import time
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from ember.memcopy import address_of as _address
from ember.memcopy import copy as copy_bytes
from ember.object_store.arena import (
    Arena,
    create_arena_file,
    layout,
    remove_arena_file,
)
from ember.object_store.store import ObjectStore

CAPACITY = 8 * 1024 * 1024


@pytest.fixture
def arena_path() -> Iterator[str]:
    path = f"/dev/shm/ember-test-arena-{os.getpid()}-{uuid.uuid4().hex}"
    create_arena_file(path, CAPACITY)
    try:
        yield path
    finally:
        remove_arena_file(path)
        assert not os.path.exists(path)


@pytest.fixture
def arena(arena_path: str) -> Iterator[Arena]:
    a = Arena(arena_path, CAPACITY)
    try:
        yield a
    finally:
        a.close()


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gc.collect()
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_arena_file_is_private_sparse_and_exclusive(arena_path: str) -> None:
    st = os.stat(arena_path)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_size == CAPACITY
    assert st.st_blocks * 512 < CAPACITY  # sparse: nothing allocated until written
    with pytest.raises(FileExistsError):
        create_arena_file(arena_path, CAPACITY)


def test_remove_arena_file_is_idempotent() -> None:
    path = f"/dev/shm/ember-test-arena-{os.getpid()}-{uuid.uuid4().hex}"
    create_arena_file(path, 4096)
    remove_arena_file(path)
    remove_arena_file(path)
    assert not os.path.exists(path)


def test_write_read_round_trip(arena: Arena, arena_path: str) -> None:
    payload = os.urandom(100_000)
    assert arena.write(4096, [payload]) == len(payload)
    assert bytes(arena.view(4096, len(payload))) == payload
    # A second, independent mapping (another process would do the same) sees the bytes.
    other = Arena(arena_path, CAPACITY)
    try:
        assert bytes(other.view(4096, len(payload))) == payload
    finally:
        other.close()


def test_write_accepts_every_chunk_type(arena: Arena) -> None:
    arr = np.arange(12, dtype=np.int32).reshape(3, 4)
    fortran = np.asfortranarray(arr)
    chunks = [
        b"abc",
        bytearray(b"de"),
        memoryview(b"fgh")[1:],
        pickle.PickleBuffer(arr),
        memoryview(fortran),
        memoryview(arr[:, ::2]),  # non-contiguous: packed before copying
    ]
    written = arena.write(0, chunks)
    expected = b"abcdegh" + arr.tobytes() + fortran.tobytes(order="A") + arr[:, ::2].tobytes()
    assert written == len(expected)
    assert bytes(arena.view(0, written)) == expected


def test_padded_chunks_are_aligned(arena: Arena) -> None:
    header = b"x" * 10
    a = np.arange(100, dtype=np.float64)
    b = np.arange(7, dtype=np.uint8)
    c = np.arange(33, dtype=np.int16)
    base = 8192
    span = arena.write(base, [header, a, b, c], pad_to=64)
    starts, total = layout([len(header), a.nbytes, b.nbytes, c.nbytes], pad_to=64)
    assert starts == [0, 64, 64 + 832, 64 + 832 + 64]
    assert span == total == starts[-1] + c.nbytes
    whole = arena.view(base, span)
    assert bytes(whole[:10]) == header
    for start, arr in zip(starts[1:], (a, b, c), strict=True):
        got = np.frombuffer(whole, dtype=arr.dtype, count=arr.size, offset=start)
        np.testing.assert_array_equal(got, arr)
        assert got.ctypes.data % 64 == 0


@pytest.mark.parametrize("shift", [0, 176, 2048, 4080])
def test_large_writes_at_every_page_offset(arena: Arena, shift: int) -> None:
    # Large copies take a blocked path when the destination trails the source by a little
    # modulo the page size; both paths must produce the same bytes.
    arr = np.random.default_rng(shift).integers(0, 255, 5 << 20, dtype=np.uint8)
    pos = (arr.ctypes.data + shift) % 4096
    assert arena.write(pos, [arr]) == arr.nbytes
    np.testing.assert_array_equal(np.frombuffer(arena.view(pos, arr.nbytes), np.uint8), arr)


def test_buffer_address_matches_numpy() -> None:
    arr = np.arange(1000, dtype=np.uint8)
    arr.flags.writeable = False
    assert _address(memoryview(arr)[10:]) == arr.ctypes.data + 10
    assert _address(memoryview(b"readonly bytes")) is not None


def test_a_large_copy_in_two_halves_is_exact() -> None:
    """Copies of 64 MB and up run in two halves on two threads: every byte lands, the
    middle included (the split is page aligned, the length is not)."""
    n = (64 << 20) + 12_345
    src = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
    dst = np.zeros(n, dtype=np.uint8)
    copy_bytes(memoryview(dst), memoryview(src))
    assert np.array_equal(dst, src)


def test_a_write_large_enough_for_two_threads_lands_whole_and_the_arena_closes() -> None:
    path = f"/dev/shm/ember-test-arena-{os.getpid()}-{uuid.uuid4().hex}"
    capacity = 80 << 20
    create_arena_file(path, capacity)
    try:
        big = Arena(path, capacity)
        src = np.random.default_rng(3).integers(0, 256, (70 << 20) + 333, dtype=np.uint8)
        big.write(4096, [memoryview(src)])
        view = big.view(4096, src.nbytes)
        assert np.array_equal(np.frombuffer(view, dtype=np.uint8), src)
        del view
        big.close()  # no view of the mapping is left behind by the copy
    finally:
        remove_arena_file(path)


def test_view_is_read_only_and_zero_copy(arena: Arena) -> None:
    arena.write(0, [b"\x01" * 16])
    view = arena.view(0, 16)
    assert view.readonly
    assert len(view) == 16 and view.format == "B"
    with pytest.raises(TypeError):
        view[0] = 2
    arr = np.frombuffer(view, dtype=np.uint8)
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0] = 2
    # Later writes show through: the view is backed by the mapping, not a copy.
    arena.write(0, [b"\x07" * 16])
    assert arr[0] == 7 and view[15] == 7


def test_writable_view_writes_into_the_arena(arena: Arena) -> None:
    w = arena.writable_view(100, 8)
    w[:] = b"ABCDEFGH"
    assert bytes(arena.view(100, 8)) == b"ABCDEFGH"
    del w


def test_out_of_range_is_rejected(arena: Arena) -> None:
    with pytest.raises(ValueError):
        arena.view(CAPACITY - 4, 8)
    with pytest.raises(ValueError):
        arena.view(-1, 1)
    with pytest.raises(ValueError):
        arena.write(CAPACITY - 4, [b"12345678"])
    with pytest.raises(ValueError):
        arena.writable_view(CAPACITY, 1)
    assert len(arena.view(CAPACITY, 0)) == 0


def test_write_limit_protects_neighbours(arena: Arena) -> None:
    arena.write(4096, [b"\xff" * 8])
    with pytest.raises(ValueError, match="do not fit"):
        arena.write(0, [b"a" * 4000, b"b" * 100], pad_to=64, limit=4096)
    assert bytes(arena.view(0, 4)) == b"\x00" * 4  # nothing was copied
    assert arena.write(0, [b"a" * 4000], pad_to=64, limit=4096) == 4000


def test_on_release_fires_once_after_numpy_arrays_are_gone(arena: Arena) -> None:
    data = np.arange(1000, dtype=np.float64)
    arena.write(0, [data])
    calls: list[int] = []
    view = arena.view(0, data.nbytes, on_release=lambda: calls.append(1))
    arr = np.frombuffer(view, dtype=np.float64)
    tail = arr[500:]
    sliced = view[8:16]
    del view, arr
    gc.collect()
    assert calls == []  # the slice and the derived array still hold the memory
    np.testing.assert_array_equal(tail, data[500:])
    del tail
    gc.collect()
    assert calls == []
    assert bytes(sliced) == data[1:2].tobytes()
    del sliced
    assert wait_until(lambda: calls == [1])
    gc.collect()
    assert calls == [1]


def test_on_release_covers_pickle5_out_of_band_buffers(arena: Arena) -> None:
    value = {"a": np.arange(10_000, dtype=np.int64), "b": np.ones((50, 40), dtype=np.float32)}
    buffers: list[pickle.PickleBuffer] = []
    header = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    starts, span = layout([len(header)] + [b.raw().nbytes for b in buffers], pad_to=64)
    arena.write(0, [header, *buffers], pad_to=64)
    calls: list[int] = []
    view = arena.view(0, span, on_release=lambda: calls.append(1))
    sizes = [b.raw().nbytes for b in buffers]
    oob = [view[s : s + n] for s, n in zip(starts[1:], sizes, strict=True)]
    got = pickle.loads(view[: len(header)], buffers=oob)
    del view, oob
    gc.collect()
    np.testing.assert_array_equal(got["a"], value["a"])
    np.testing.assert_array_equal(got["b"], value["b"])
    assert not got["a"].flags.writeable
    assert calls == []
    keep_b = got["b"]
    del got
    gc.collect()
    assert calls == []
    del keep_b
    assert wait_until(lambda: calls == [1])


def test_views_have_independent_callbacks(arena: Arena) -> None:
    calls: list[str] = []
    first = arena.view(0, 10, on_release=lambda: calls.append("first"))
    second = arena.view(0, 10, on_release=lambda: calls.append("second"))
    del first
    assert wait_until(lambda: calls == ["first"])
    del second
    assert wait_until(lambda: calls == ["first", "second"])


def test_close_with_outstanding_views_keeps_them_valid(arena_path: str) -> None:
    a = Arena(arena_path, CAPACITY)
    a.write(0, [b"still here"])
    calls: list[int] = []
    arr = np.frombuffer(a.view(0, 10, on_release=lambda: calls.append(1)), dtype=np.uint8)
    a.close()  # must not unmap under the array
    assert arr.tobytes() == b"still here"
    with pytest.raises(ValueError, match="closed"):
        a.view(0, 1)
    del arr
    assert wait_until(lambda: calls == [1])


def test_close_without_views_and_lazy_mapping(arena_path: str) -> None:
    a = Arena(arena_path, CAPACITY)
    assert "unmapped" in repr(a)
    a.write(0, [b"x"])
    assert "mapped" in repr(a)
    a.close()
    a.close()
    assert "closed" in repr(a)


def test_store_and_arena_together_reuse_released_memory(arena: Arena) -> None:
    """The raylet's bookkeeping and a client's copies, end to end in one process."""
    store = ObjectStore(CAPACITY)
    arr = np.random.default_rng(0).random(100_000)
    offset = store.create(b"obj-1", arr.nbytes, "driver")
    arena.write(offset, [arr], limit=arr.nbytes)
    store.seal(b"obj-1")
    got_offset, size = store.get(b"obj-1", "worker")
    read = np.frombuffer(
        arena.view(got_offset, size, on_release=lambda: store.release(b"obj-1", "worker")),
        dtype=np.float64,
    )
    np.testing.assert_array_equal(read, arr)
    store.delete(b"obj-1")
    assert store.stats()["used_bytes"] > 0  # the worker's array still pins it
    del read
    assert wait_until(lambda: store.stats()["used_bytes"] == 0)
    assert store.create(b"obj-2", arr.nbytes, "driver") == offset
