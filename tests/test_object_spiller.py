"""The raylet's spiller against a real arena file and spill directory, without processes:
the bytes that come back from disk or from a move (a slide over itself included) are the
bytes that went in."""

from __future__ import annotations

import asyncio
import os

import pytest
from ember.exceptions import ObjectStoreFullError
from ember.object_store.arena import Arena, create_arena_file
from ember.object_store.spill import SpillFiles
from ember.object_store.store import ObjectStore
from ember.raylet.object_spiller import ObjectSpiller

A = 4096


def oid(n: int) -> bytes:
    return n.to_bytes(4, "big") + b"\xcc" * 16


def payload(n: int, size: int) -> bytes:
    return (n.to_bytes(2, "big") * (size // 2 + 1))[:size]


@pytest.fixture
def rig(tmp_path):
    path = str(tmp_path / "arena")
    capacity = 16 * A
    create_arena_file(path, capacity)
    arena = Arena(path, capacity)
    made = []

    def make(spill: bool = True, **kw) -> tuple[ObjectStore, ObjectSpiller]:
        store = ObjectStore(capacity)
        files = SpillFiles(str(tmp_path / "ember-spill-t")) if spill else None
        spiller = ObjectSpiller(store, lambda: arena, files, **kw)
        made.append(spiller)
        return store, spiller

    yield make, arena, tmp_path
    for s in made:
        s.close()
    arena.close()


async def _put(spiller: ObjectSpiller, store: ObjectStore, arena: Arena, n: int, size: int):
    offset = await spiller.create(oid(n), size, "w", None, primary=True)
    arena.write(offset, [payload(n, size)])
    store.seal(oid(n))


async def _read(spiller: ObjectSpiller, store: ObjectStore, arena: Arena, n: int) -> bytes:
    got = store.get(oid(n), "r")
    if got is None:
        assert await spiller.restore(oid(n))
        got = store.get(oid(n), "r")
    offset, size = got
    data = bytes(arena.view(offset, size))
    store.release(oid(n), "r")
    return data


def test_spilled_objects_come_back_whole(rig) -> None:
    make, arena, tmp_path = rig
    store, spiller = make(threshold=1.0)

    async def run() -> None:
        for n in range(8):  # 8 objects of 3 blocks in a 16-block arena
            await _put(spiller, store, arena, n, 3 * A - 100)
        assert store.stats()["num_spilled"] >= 3
        for n in range(8):
            assert await _read(spiller, store, arena, n) == payload(n, 3 * A - 100)

    asyncio.run(run())
    files = os.listdir(tmp_path / "ember-spill-t")
    assert len(files) == store.stats()["num_spilled"] and spiller.stats()["bytes_on_disk"] > 0


def test_compaction_moves_keep_the_bytes_even_sliding_over_themselves(rig) -> None:
    make, arena, _ = rig
    store, spiller = make(spill=False)

    async def run() -> None:
        # [1 block][5 blocks][1 block][9 blocks, pinned]: once the 1-block ones are freed,
        # no hole holds the 5-block object: only sliding it down one block (over itself)
        # joins the two holes.
        sizes = {0: A, 1: 5 * A, 2: A, 3: 9 * A}
        for n, size in sizes.items():
            await _put(spiller, store, arena, n, size)
        store.get(oid(3), "pinned")
        store.delete(oid(0))
        store.delete(oid(2))
        await _put(spiller, store, arena, 9, 2 * A)
        assert spiller.stats()["moved_objects"] == 1
        assert await _read(spiller, store, arena, 1) == payload(1, 5 * A)
        assert await _read(spiller, store, arena, 9) == payload(9, 2 * A)
        assert await _read(spiller, store, arena, 3) == payload(3, 9 * A)

    asyncio.run(run())


def test_pinned_store_waits_out_the_grace_then_raises(rig) -> None:
    make, arena, _ = rig
    store, spiller = make(spill=False, grace_seconds=0.3)

    async def run() -> None:
        await _put(spiller, store, arena, 0, 16 * A)
        store.get(oid(0), "reader")
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(ObjectStoreFullError):
            await spiller.create(oid(1), A, "w", None, primary=True)
        assert loop.time() - started >= 0.3
        # A release within the grace lets the next create through.
        store.delete(oid(0))  # freed once the reader lets go
        creating = asyncio.ensure_future(spiller.create(oid(1), A, "w", None, primary=True))
        await asyncio.sleep(0.05)
        store.release(oid(0), "reader")
        spiller.room_freed()
        assert await creating == 0

    asyncio.run(run())
